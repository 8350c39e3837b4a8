package proxy

import (
	"net/http"
	"strconv"

	"github.com/asyncrl/asyncrl/actors/router/front"
	"github.com/asyncrl/asyncrl/actors/router/policy"
)

// Version headers: the oldest and newest weight version the replica was
// known to serve (a policy.SetVersion change, from acks, discovery or the admin API)
// while the request was on it. A request that straddled a weight swap
// carries both versions; the rollout client stamps every generated token
// with the minimum (staleness counts from the oldest) when the engine
// reports no per-token versions of its own (vLLM).
const (
	VersionMinHeader = front.VersionMinHeader
	VersionMaxHeader = front.VersionMaxHeader
)

// A front.Span is the range of versions one replica was known to serve
// between a request's routing and its end (the fronts hold it as an
// attempt's handle). It is written only under Router.mu.

func widen(s *front.Span, v int64) {
	s.Min, s.Max = min(s.Min, v), max(s.Max, v)
}

// openSpan starts tracking the versions url serves, from its current one.
// Caller holds r.mu.
func (r *Router) openSpan(url string) *front.Span {
	v, _ := r.core.Version(url)
	s := &front.Span{Replica: url, Min: v, Max: v}
	set := r.spans[url]
	if set == nil {
		set = make(map[*front.Span]struct{})
		r.spans[url] = set
	}
	set[s] = struct{}{}
	return s
}

// observeVersion widens the open spans of the replica a change gave a
// version (SetVersion, or AddReplica of a replica that was removed while
// requests were on it) to that version. Every version change is a typed
// change through Router.Apply (the actor shells' acks, discovery, the
// admin API), which calls it after the change, under r.mu; so a span sees
// every version its replica was recorded as serving while it was open, in
// the order the mutex serialises them.
func (r *Router) observeVersion(ch policy.Change) {
	switch ch.(type) {
	case policy.SetVersion, policy.AddReplica:
	default:
		return
	}
	url := ch.Replica()
	v, ok := r.core.Version(url)
	if !ok {
		return
	}
	for s := range r.spans[url] {
		widen(s, v)
	}
}

// span returns a snapshot of s, and ends it when end is set.
func (r *Router) span(s *front.Span, end bool) front.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.spanLocked(s, end)
}

// answered is span for the replica's answer (its headers are in): in the
// same critical section it counts the answer as a passive success, which
// resets the replica's failure streak, so the answer costs one lock, not
// two. A transition it causes is logged after the lock is released.
func (r *Router) answered(s *front.Span, end bool) front.Span {
	r.mu.Lock()
	changed, err := r.core.ObserveHealth(s.Replica, true, false)
	out := r.spanLocked(s, end)
	r.mu.Unlock()
	if err == nil && changed {
		r.log.Info().Str("replica", s.Replica).Msg("replica healthy again")
	}
	return out
}

// spanLocked is span with r.mu held.
func (r *Router) spanLocked(s *front.Span, end bool) front.Span {
	out := *s
	if end {
		set := r.spans[s.Replica]
		delete(set, s)
		if len(set) == 0 {
			if _, ok := r.core.Version(s.Replica); !ok {
				delete(r.spans, s.Replica) // replica gone: drop its empty set
			}
		}
	}
	return out
}

// setVersionHeaders writes s into h (response headers or trailers).
func setVersionHeaders(h http.Header, s front.Span) {
	h.Set(VersionMinHeader, strconv.FormatInt(s.Min, 10))
	h.Set(VersionMaxHeader, strconv.FormatInt(s.Max, 10))
}
