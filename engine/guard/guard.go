package guard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/internal/logx"
	"github.com/asyncrl/asyncrl/internal/netx"
)

// Sentinel errors of New.
var (
	// ErrNoKey: a guard without a key would guard nothing.
	ErrNoKey = errors.New("guard: no key: the guard requires a key on every route (asyncrl engine-guard --key-file)")
	// ErrUpstream: the engine URL is not an absolute http(s) URL.
	ErrUpstream = errors.New("guard: bad engine URL (asyncrl engine-guard --engine http://127.0.0.1:8001)")
)

// Config configures a Guard.
type Config struct {
	// Upstream is the engine's base URL, e.g. http://127.0.0.1:8001. A
	// path in it prefixes every forwarded path.
	Upstream string
	// Key is the key every request must carry as "Authorization: Bearer
	// <key>". Required.
	Key string
	// UpstreamKey, when set, is sent to the engine in place of the
	// caller's Authorization (an engine started with its own --api-key).
	// Empty: the caller's header, which carried Key, goes on unchanged.
	UpstreamKey string
	// OpenHealth lets GET and HEAD /health through without the key (load
	// balancer probes that cannot send one). Off by default: asyncrl's
	// router and drivers send the key on their health checks too.
	OpenHealth bool
	// Transport carries requests to the engine; nil: a pooled,
	// proxy-less transport that passes Accept-Encoding through.
	Transport http.RoundTripper
	// Registerer receives the guard's metrics; nil: not registered.
	Registerer prometheus.Registerer
	// Logger receives refusals (rate-limited) and engine errors.
	Logger zerolog.Logger
}

// Guard is an http.Handler that forwards keyed requests to one engine.
type Guard struct {
	upstream   *url.URL
	key        string
	upAuth     string // "Bearer <UpstreamKey>"; "" = the caller's header
	openHealth bool
	rp         *httputil.ReverseProxy
	met        *metrics
	refuseLog  zerolog.Logger
	errLog     zerolog.Logger
}

// New builds a guard for cfg.Upstream.
func New(cfg Config) (*Guard, error) {
	if cfg.Key == "" {
		return nil, ErrNoKey
	}
	u, err := url.Parse(cfg.Upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%w: %q", ErrUpstream, cfg.Upstream)
	}
	met, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	g := &Guard{
		upstream: u, key: cfg.Key, openHealth: cfg.OpenHealth, met: met,
		refuseLog: logx.Limit(cfg.Logger, 5, time.Minute),
		errLog:    logx.Limit(cfg.Logger, 5, time.Minute),
	}
	if cfg.UpstreamKey != "" {
		g.upAuth = "Bearer " + cfg.UpstreamKey
	}
	tr := cfg.Transport
	if tr == nil {
		tr = DefaultTransport()
	}
	g.rp = &httputil.ReverseProxy{
		Rewrite:      g.rewrite,
		Transport:    tr,
		BufferPool:   bufPool{},
		ErrorHandler: g.upstreamError,
		// ReverseProxy's own messages (a body copy cut short, mostly by
		// a caller that went away) go to the log at debug level, not to
		// the standard logger.
		// Its own sampler: these must not use up errLog's budget.
		ErrorLog: log.New(debugWriter{logx.Limit(cfg.Logger, 5, time.Minute)}, "", 0),
		// The default flush policy already flushes event streams and
		// answers without Content-Length at once; a fixed-size answer
		// is written through the server's own buffer.
	}
	return g, nil
}

// DefaultTransport is the guard's transport to its engine: no environment
// proxy (engine traffic is local), a deep idle pool (every concurrent
// caller keeps its upstream connection), and Accept-Encoding untouched.
func DefaultTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.MaxIdleConns, t.MaxIdleConnsPerHost = 1024, 1024
	t.DisableCompression = true
	t.ForceAttemptHTTP2 = false
	return t
}

// ServeHTTP refuses a request without the key and forwards the rest.
func (g *Guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.met.requests.Inc()
	if reason := g.refusal(r); reason != "" {
		g.refuse(w, r, reason)
		return
	}
	defer g.countCut(r)
	g.rp.ServeHTTP(w, r)
}

// countCut counts an answer cut mid-stream: ReverseProxy aborts the
// caller's connection (http.ErrAbortHandler) when the engine's body fails
// after the status went out. A caller that went away is not the engine's
// failure. The panic goes on to net/http, which closes the connection.
func (g *Guard) countCut(r *http.Request) {
	p := recover()
	if p == nil {
		return
	}
	if p == http.ErrAbortHandler && r.Context().Err() == nil {
		g.met.upstreamErrors.Inc()
		g.errLog.Warn().Str("engine", g.upstream.Redacted()).Str("method", r.Method).Str("path", r.URL.Path).
			Msg("engine-guard: the engine's answer broke off mid-stream; the caller's connection was aborted")
	}
	panic(p)
}

// Refusal reasons (the reason label of asyncrl_engine_guard_refused_total).
const (
	ReasonNoKey     = "no_key"     // no Authorization header
	ReasonNotBearer = "not_bearer" // another scheme
	ReasonWrongKey  = "wrong_key"  // a bearer token that is not the key
)

// refusal is why r may not pass ("" when it may).
func (g *Guard) refusal(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if h == "" {
		if g.openHealth && r.URL.Path == "/health" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			return ""
		}
		return ReasonNoKey
	}
	tok, ok := netx.BearerToken(h)
	if !ok {
		return ReasonNotBearer
	}
	if !netx.TokenEqual(tok, g.key) {
		return ReasonWrongKey
	}
	return ""
}

var unauthorized = []byte(`{"error":"Unauthorized"}`)

func (g *Guard) refuse(w http.ResponseWriter, r *http.Request, reason string) {
	g.met.refused(reason)
	// Never the presented token: a wrong key may be a right key for
	// another engine.
	g.refuseLog.Warn().Str("reason", reason).Str("method", r.Method).Str("path", r.URL.Path).
		Str("remote", r.RemoteAddr).Msg("engine-guard: refused a request without the key")
	h := w.Header()
	h.Set("WWW-Authenticate", `Bearer realm="asyncrl-engine-guard"`)
	h.Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	_, _ = w.Write(unauthorized)
}

// rewrite points the outbound request at the engine. The inbound path and
// query go on as they came; only the scheme, host (and a base path) and,
// with an upstream key, Authorization change.
func (g *Guard) rewrite(pr *httputil.ProxyRequest) {
	pr.SetURL(g.upstream)
	pr.SetXForwarded()
	if g.upAuth != "" {
		pr.Out.Header.Set("Authorization", g.upAuth)
	}
}

// upstreamError answers a request the engine did not answer.
func (g *Guard) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		// The caller went away; nobody reads an answer.
		return
	}
	g.met.upstreamErrors.Inc()
	g.errLog.Warn().Err(err).Str("engine", g.upstream.Redacted()).Str("method", r.Method).Str("path", r.URL.Path).
		Msg("engine-guard: the engine did not answer")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadGateway)
	_ = json.NewEncoder(w).Encode(map[string]string{
		"error": fmt.Sprintf("engine-guard: engine %s did not answer: %v (is it running and is --engine right?)", g.upstream.Redacted(), err),
	})
}

// bufPool hands ReverseProxy its 32 KiB copy buffers from a pool instead of
// a fresh one per request.
type bufPool struct{}

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufPool) Get() []byte  { return *(copyBufs.Get().(*[]byte)) }
func (bufPool) Put(b []byte) { copyBufs.Put(&b) }

// debugWriter logs each write as one debug record.
type debugWriter struct{ l zerolog.Logger }

func (d debugWriter) Write(p []byte) (int, error) {
	d.l.Debug().Msg("engine-guard: " + strings.TrimSpace(string(p)))
	return len(p), nil
}
