package server

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/asyncrl/asyncrl/tinker"
)

// retrieve is retrieve_future: a finished result as stored (its bytes,
// encoded once), or after tinker.long_poll a try_again answer the SDK
// polls again on; an unknown id 404, an evicted one 410 saying why.
func (s *Server) retrieve(_ http.ResponseWriter, r *http.Request, body []byte) (any, error) {
	var req tinker.RetrieveFutureRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if req.RequestID == "" {
		return nil, tinker.FieldErrors{{Loc: []any{"body", "request_id"}, Msg: "Field required", Type: "missing"}}
	}
	start := time.Now()
	defer func() { s.met.retrieve.Observe(time.Since(start).Seconds()) }()
	deadline := time.NewTimer(s.cfg.Tinker.LongPoll)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		v := s.core.Lookup(req.RequestID)
		var ch chan struct{}
		if v.Found && !v.Done {
			ch = s.waiters[req.RequestID]
			if ch == nil {
				ch = make(chan struct{})
				s.waiters[req.RequestID] = ch
			}
		}
		s.mu.Unlock()
		switch {
		case v.Found && v.Done:
			return rawJSON(v.Result), nil
		case !v.Found:
			return s.retrieveStored(r.Context(), req.RequestID, v.Gone)
		}
		select {
		case <-ch:
		case <-deadline.C:
			return tinker.TryAgainResponse{Type: "try_again", RequestID: req.RequestID, QueueState: "active"}, nil
		case <-r.Context().Done():
			return nil, httpErr(http.StatusRequestTimeout, "client went away")
		case <-s.stop:
			return tinker.TryAgainResponse{Type: "try_again", RequestID: req.RequestID, QueueState: "paused_capacity"}, nil
		}
	}
}

// retrieveStored answers a training future no longer (or not yet, after a
// restart) in memory from JetStream.
func (s *Server) retrieveStored(ctx context.Context, id, gone string) (any, error) {
	if strings.HasPrefix(id, "t-") {
		rec, ok, err := s.store.get(ctx, id)
		if err != nil {
			return nil, httpErr(http.StatusServiceUnavailable, "%v", err)
		}
		if ok {
			if rec.State == "pending" {
				// Written by this process and not finished: it is queued.
				return tinker.TryAgainResponse{Type: "try_again", RequestID: id, QueueState: "active"}, nil
			}
			return rawJSON(rec.Result), nil
		}
	}
	if gone != "" {
		return nil, httpErr(http.StatusGone, "future %s: %s", id, gone)
	}
	return nil, httpErr(http.StatusNotFound, "unknown request_id %q", id)
}
