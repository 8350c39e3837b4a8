package proxy

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/asyncrl/asyncrl/actors/router/policy"
	"github.com/asyncrl/asyncrl/internal/netx"
)

// replicaJSON is one replica in GET /admin/replicas.
type replicaJSON struct {
	URL              string  `json:"url"`
	Healthy          bool    `json:"healthy"`
	State            string  `json:"state"`
	Version          int64   `json:"version"`
	Lag              int64   `json:"lag"` // versions behind the newest acknowledged one
	Eligible         bool    `json:"eligible"`
	Sessions         int     `json:"sessions"`
	InflightRequests int     `json:"inflight_requests"`
	InflightTokens   int64   `json:"inflight_tokens"`
	QueueLen         int     `json:"queue_len"`
	KVUsage          float64 `json:"kv_usage"`
}

// admin serves the admin API:
//
//	GET    /admin/replicas                      list replicas with load, sessions, health, version
//	POST   /admin/replicas?url=U[&version=V]    add a replica
//	DELETE /admin/replicas?url=U                remove a replica
//	POST   /admin/replicas/drain?url=U          stop new sessions on U, keep its existing ones
//	POST   /admin/replicas/state?url=U&state=S  set state (active, paused, updating, draining)
//	POST   /admin/replicas/version?url=U&version=V  record the version U serves
//	GET    /admin/sessions?session_id=ID        look up a session
//	GET    /admin/min_version                   read the minimum version
//	POST   /admin/min_version?version=V         set the minimum version
//
// With an AdminToken configured every call needs it (401 otherwise).
// Unknown paths get 404, wrong methods 405.
func (r *Router) admin(w http.ResponseWriter, req *http.Request) {
	if r.cfg.AdminToken != "" && !r.authorized(req) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="asyncrl-router"`)
		writeError(w, http.StatusUnauthorized, "admin token required")
		return
	}
	route, ok := adminRoutes[strings.TrimSuffix(req.URL.Path, "/")]
	if !ok {
		writeError(w, http.StatusNotFound, "unknown admin path "+req.URL.Path)
		return
	}
	if !slices.Contains(route.methods, req.Method) {
		w.Header().Set("Allow", strings.Join(route.methods, ", "))
		writeError(w, http.StatusMethodNotAllowed, req.Method+" not allowed on "+req.URL.Path)
		return
	}
	route.serve(r, w, req, req.URL.Query())
}

// adminRoute is one admin path: the methods it allows and its handler.
type adminRoute struct {
	methods []string
	serve   func(r *Router, w http.ResponseWriter, req *http.Request, q url.Values)
}

var adminRoutes = map[string]adminRoute{
	"/admin/replicas":         {[]string{http.MethodGet, http.MethodPost, http.MethodDelete}, (*Router).adminReplicas},
	"/admin/replicas/drain":   {[]string{http.MethodPost}, (*Router).adminDrain},
	"/admin/replicas/state":   {[]string{http.MethodPost}, (*Router).adminState},
	"/admin/replicas/version": {[]string{http.MethodPost}, (*Router).adminVersion},
	"/admin/sessions":         {[]string{http.MethodGet}, (*Router).adminSessions},
	"/admin/min_version":      {[]string{http.MethodGet, http.MethodPost}, (*Router).adminMinVersion},
}

func (r *Router) adminReplicas(w http.ResponseWriter, req *http.Request, q url.Values) {
	switch req.Method {
	case http.MethodGet:
		r.listReplicas(w)
	case http.MethodPost:
		u := strings.TrimRight(q.Get("url"), "/")
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			writeError(w, http.StatusBadRequest, "url must be an http(s) base URL")
			return
		}
		v, ok := optInt(w, q, "version")
		if !ok {
			return
		}
		r.change(w, http.StatusCreated, policy.AddReplica{URL: u, Version: v})
	case http.MethodDelete:
		u := strings.TrimRight(q.Get("url"), "/")
		r.change(w, http.StatusOK, policy.RemoveReplica{URL: u})
	}
}

func (r *Router) adminDrain(w http.ResponseWriter, _ *http.Request, q url.Values) {
	u := strings.TrimRight(q.Get("url"), "/")
	r.change(w, http.StatusOK, policy.SetState{URL: u, State: policy.Draining})
}

func (r *Router) adminState(w http.ResponseWriter, _ *http.Request, q url.Values) {
	s, err := policy.ParseState(q.Get("state"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	u := strings.TrimRight(q.Get("url"), "/")
	r.change(w, http.StatusOK, policy.SetState{URL: u, State: s})
}

func (r *Router) adminVersion(w http.ResponseWriter, _ *http.Request, q url.Values) {
	v, ok := reqInt(w, q, "version")
	if !ok {
		return
	}
	u := strings.TrimRight(q.Get("url"), "/")
	r.change(w, http.StatusOK, policy.SetVersion{URL: u, Version: v})
}

func (r *Router) adminSessions(w http.ResponseWriter, _ *http.Request, q url.Values) {
	id := q.Get("session_id")
	s, ok := r.Lookup(id)
	if !ok {
		writeError(w, http.StatusNotFound, "unknown session "+strconv.Quote(id))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"session_id": s.Key, "replica": s.Replica, "last_access": s.LastAccess.UTC().Format(time.RFC3339Nano)})
}

func (r *Router) adminMinVersion(w http.ResponseWriter, req *http.Request, q url.Values) {
	if req.Method == http.MethodPost {
		v, ok := reqInt(w, q, "version")
		if !ok {
			return
		}
		if err := r.Apply(policy.SetMinVersion{Version: v}); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"min_version": r.MinVersion()})
}

func (r *Router) authorized(req *http.Request) bool {
	tok := req.Header.Get("X-Admin-Token")
	if t, ok := netx.BearerToken(req.Header.Get("Authorization")); ok {
		tok = t
	}
	return netx.TokenEqual(tok, r.cfg.AdminToken)
}

func (r *Router) listReplicas(w http.ResponseWriter) {
	var (
		vs       []policy.ReplicaView
		minV     int64
		sessions int
	)
	r.mu.Lock()
	vs, minV, sessions = r.core.Replicas(), r.core.MinVersion(), r.core.SessionCount()
	r.mu.Unlock()
	out := make([]replicaJSON, len(vs))
	for i, v := range vs {
		out[i] = replicaJSON{URL: v.URL, Healthy: v.Healthy, State: v.State.String(), Version: v.Version, Lag: v.Lag, Eligible: v.Eligible,
			Sessions: v.Sessions, InflightRequests: v.InflightRequests, InflightTokens: v.InflightTokens, QueueLen: v.QueueLen, KVUsage: v.KVUsage}
	}
	writeJSON(w, http.StatusOK, map[string]any{"policy": r.cfg.Policy.Policy, "min_version": minV, "sessions": sessions, "replicas": out})
}

// change applies ch to the core and answers ok, 404 (unknown replica), 409
// (duplicate) or 400.
func (r *Router) change(w http.ResponseWriter, ok int, ch policy.Change) {
	err := r.Apply(ch)
	switch {
	case err == nil:
		writeJSON(w, ok, map[string]any{"ok": true})
	case errors.Is(err, policy.ErrUnknownReplica):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, policy.ErrDuplicateReplica):
		writeError(w, http.StatusConflict, err.Error())
	default:
		writeError(w, http.StatusBadRequest, err.Error())
	}
}

func reqInt(w http.ResponseWriter, q map[string][]string, name string) (int64, bool) {
	vals := q[name]
	if len(vals) == 0 || vals[0] == "" {
		writeError(w, http.StatusBadRequest, name+" is required")
		return 0, false
	}
	return optInt(w, q, name)
}

func optInt(w http.ResponseWriter, q map[string][]string, name string) (int64, bool) {
	vals := q[name]
	if len(vals) == 0 || vals[0] == "" {
		return 0, true
	}
	v, err := strconv.ParseInt(vals[0], 10, 64)
	if err != nil {
		writeError(w, http.StatusBadRequest, name+" must be an integer")
		return 0, false
	}
	return v, true
}
