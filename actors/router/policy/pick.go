package policy

import (
	"math"
	"sort"
	"time"
)

// better reports whether a beats b as a placement for key: by load, then
// by sessions, then by the highest rendezvous weight of "key:url" (or
// rng/URL order without a key).
func (c *Core) better(key string, la, lb float64, a, b *replica) bool {
	if la != lb {
		return la < lb
	}
	if a.sessions != b.sessions {
		return a.sessions < b.sessions
	}
	if key != "" {
		return rendezvous(key, a.url) > rendezvous(key, b.url)
	}
	return false
}

// pickNew chooses a replica for a new (or moved, or untracked) request.
func (c *Core) pickNew(now time.Time, req Request, key string) *replica {
	switch c.cfg.Policy {
	case StickyLeastLoaded:
		return c.pickMin(key, math.MaxInt, func(r *replica) float64 { return float64(r.sessions) })
	case BoundedSticky:
		// Mirrokni et al.: only replicas under the session cap qualify; the
		// least-sessions replica always does, so the set is never empty.
		n, total := 0, 0
		for _, r := range c.order {
			if c.takesNew(r) {
				n++
				total += r.sessions
			}
		}
		if n == 0 {
			return nil
		}
		add := 0
		if key != "" {
			add = 1
		}
		// Fewest sessions first (SkyRL's count), work only among equals:
		// work-first let a replica whose sessions happened to be shorter
		// take a ninth session while another kept seven (BENCHMARKS.md).
		return c.pickFewest(now, key, c.sessionCap(total+add, n)-add)
	case ConsistentHash:
		return c.pickLeastRequest()
	}
	return nil
}

// pickMin returns the replica that takes new sessions, holds at most
// maxSessions, and is best by (metric, sessions, rendezvous weight of key);
// without a key, exact ties are broken uniformly with rng (reservoir
// sampling) or by URL order when rng is nil.
func (c *Core) pickMin(key string, maxSessions int, metric func(*replica) float64) *replica {
	var best *replica
	var bestM float64
	ties := 0
	for _, r := range c.order {
		if !c.takesNew(r) || r.sessions > maxSessions {
			continue
		}
		m := metric(r)
		switch {
		case best == nil || c.better(key, m, bestM, r, best):
			best, bestM, ties = r, m, 1
		case key == "" && m == bestM && r.sessions == best.sessions:
			ties++
			if c.rng != nil && c.rng.Intn(ties) == 0 {
				best = r
			}
		}
	}
	return best
}

// pickFewest is bounded_sticky's placement of a new session: the replica
// that takes new sessions with at most maxSessions and the fewest
// sessions, then the least work, then the highest rendezvous weight (rng
// or URL order without a key).
func (c *Core) pickFewest(now time.Time, key string, maxSessions int) *replica {
	var best *replica
	var bestL float64
	ties := 0
	for _, r := range c.order {
		if !c.takesNew(r) || r.sessions > maxSessions {
			continue
		}
		l := c.load(now, r)
		switch {
		case best == nil || r.sessions < best.sessions || (r.sessions == best.sessions && c.better(key, l, bestL, r, best)):
			best, bestL, ties = r, l, 1
		case key == "" && l == bestL && r.sessions == best.sessions:
			ties++
			if c.rng != nil && c.rng.Intn(ties) == 0 {
				best = r
			}
		}
	}
	return best
}

func (c *Core) pickLeastRequest() *replica {
	return c.pickMin("", math.MaxInt, func(r *replica) float64 { return float64(r.inflightReqs) })
}

func (c *Core) pickRoundRobin() *replica {
	n := len(c.order)
	for i := 0; i < n; i++ {
		r := c.order[(c.rr+i)%n]
		if c.takesNew(r) {
			c.rr = (c.rr + i + 1) % n
			return r
		}
	}
	return nil
}

// sessionCap is ⌈c · total / n⌉, the most sessions a replica may hold.
func (c *Core) sessionCap(total, n int) int {
	return int(math.Ceil(c.cfg.LoadFactor*float64(total)/float64(n) - 1e-9))
}

// fleet sums sessions and load over the replicas that take new sessions.
func (c *Core) fleet(now time.Time) (n, sessions int, load float64) {
	for _, o := range c.order {
		if c.takesNew(o) {
			n++
			sessions += o.sessions
			load += c.load(now, o)
		}
	}
	return n, sessions, load
}

// spillTarget returns where a bounded_sticky session on an overloaded
// replica should go, or nil to stay. See doc.go for the rule.
func (c *Core) spillTarget(now time.Time, req Request, key string, s *session) *replica {
	r := s.replica
	if !c.takesNew(r) { // draining: keeps its sessions, no balancing
		return nil
	}
	n, total, totalL := c.fleet(now)
	if n < 2 {
		return nil
	}
	capS := c.sessionCap(total, n)
	boundL := c.cfg.LoadFactor * totalL / float64(n)
	overS := r.sessions > capS
	overL := totalL > 0 && c.load(now, r) > boundL
	if !overS && !overL {
		return nil
	}
	limit := math.Inf(1)
	if !overS {
		limit = boundL // moving for load must not create a new hot spot
	}
	prefix := req.PrefixHash
	if prefix == 0 {
		prefix = s.prefix
	}
	if c.cfg.MoveCost == 0 { // the rule before MoveCost: move whenever over
		return c.bestTarget(now, req, key, prefix, r, capS, limit)
	}
	// The target must end with fewer sessions than r keeps: a move for
	// work alone between equally populated replicas trades a transient
	// queue (the first turns' prefills) for a lasting imbalance of batch
	// size and KV footprint that every later turn pays. Over the session
	// cap this already holds (t ends ≤ cap < r.sessions).
	t := c.bestTarget(now, req, key, prefix, r, min(capS, r.sessions-1), limit)
	if t == nil {
		return nil
	}
	// Worth it? Moving loses the session's cached history, which t must
	// prefill again: MoveCost × history token-equivalents. It saves the
	// work queued ahead of this request on r rather than on t. When the
	// fleet drains at the end of a run the averages fall and r looks
	// over the bound, but its queue is short: the move would only cost.
	// A session with nothing cached loses nothing by moving: over the
	// session cap it moves even to a replica with more work queued (the cap
	// is the bound; found by the property test: 3 sessions on one replica
	// of two, cap 2, the other busier by one in-flight token).
	lost := min(s.history, int64(max(req.PromptTokens, 0)))
	if lost > 0 && c.load(now, r)-c.load(now, t) < c.cfg.MoveCost*float64(lost) {
		return nil
	}
	return t
}

// moveTarget places a session whose replica failed, lags or was avoided.
// bounded_sticky prefers a replica that holds the session's prefix, within
// the session cap and the work bound; otherwise, and for the other
// policies, it is placed like a new session.
func (c *Core) moveTarget(now time.Time, req Request, key string) *replica {
	if c.cfg.Policy == BoundedSticky && (req.PrefixHash != 0 || len(req.PrefixBlocks) > 0) {
		if n, total, totalL := c.fleet(now); n > 0 {
			limit := math.Inf(1)
			if totalL > 0 {
				limit = c.cfg.LoadFactor * totalL / float64(n)
			}
			t := c.bestTarget(now, req, key, req.PrefixHash, nil, c.sessionCap(total+1, n), limit)
			if t != nil && matchBlocks(t, req.PrefixHash, req.PrefixBlocks) > 0 {
				return t
			}
		}
	}
	return c.pickNew(now, req, key)
}

// bestTarget returns the replica other than from that takes new sessions,
// would hold at most capS sessions and at most loadLimit work with this
// request, preferring one that was sent prefix, then least work, fewest
// sessions, highest rendezvous weight; nil if none.
func (c *Core) bestTarget(now time.Time, req Request, key string, prefix uint64, from *replica, capS int, loadLimit float64) *replica {
	tok := float64(max(req.PromptTokens, 0) + max(req.ExpectedDecodeTokens, 0))
	var best *replica
	var bestL float64
	bestM := 0
	for _, t := range c.order {
		if t == from || !c.takesNew(t) || t.sessions+1 > capS {
			continue
		}
		l := c.load(now, t)
		if l+tok > loadLimit {
			continue
		}
		m := matchBlocks(t, prefix, req.PrefixBlocks)
		// The longest cached run first, then by work: not by recency, as
		// a prefix every replica holds (a long shared system prompt) says
		// nothing about where this session's own history is, and recency
		// would pile moves onto one replica.
		switch {
		case best == nil,
			m > bestM,
			m == bestM && c.better(key, l, bestL, t, best):
			best, bestL, bestM = t, l, m
		}
	}
	return best
}

// matchBlocks is how many leading prefix blocks t was sent: the longest
// k with blocks[k-1] in its LRU (found by binary search — a replica sent
// block k was sent every block before it), or 1 if it only holds the
// single prefix hash.
func matchBlocks(t *replica, prefix uint64, blocks []uint64) int {
	if n := sort.Search(len(blocks), func(i int) bool {
		_, has := t.prefixes.get(blocks[i])
		return !has
	}); n > 0 {
		return n
	}
	if prefix != 0 {
		if _, has := t.prefixes.get(prefix); has {
			return 1
		}
	}
	return 0
}

// routeHash is consistent_hash: the first ring point ≥ hash(key); if its
// replica may not take the request, HashWalk walks on past such points
// (no fixed fallback replica, which would make a hot spot) and
// HashFirstHealthy takes the first replica in URL order that may
// (vllm-router's fallback).
func (c *Core) routeHash(now time.Time, req Request, tracked bool) Decision {
	if req.SessionKey == "" {
		return c.charge(req, c.pickLeastRequest(), OutcomeUntracked, "")
	}
	key := req.SessionKey
	var s *session
	if tracked {
		s = c.sessions[key]
	}
	if s != nil {
		if o := s.replica; !c.keepsExisting(o) && o.healthy && !o.avoid && c.cfg.LagRule == LagHold {
			s.lastAccess = now
			return Decision{Outcome: OutcomeGated, From: o.url}
		}
	}
	ok := func(cand *replica) bool {
		return c.takesNew(cand) || (s != nil && s.replica == cand && c.keepsExisting(cand))
	}
	r := c.hashPick(key, ok)
	if !tracked {
		return c.charge(req, r, OutcomeUntracked, "")
	}
	from := ""
	if s != nil {
		from = s.replica.url
	}
	switch {
	case r == nil:
		c.unbind(key)
		return Decision{Outcome: OutcomeNoReplica, From: from}
	case s == nil:
		c.bind(now, key, req, r)
		return c.charge(req, r, OutcomeNew, "")
	case s.replica == r:
		s.lastAccess = now
		return c.charge(req, r, OutcomeStickyHit, "")
	default:
		c.unbind(key)
		c.bind(now, key, req, r)
		return c.charge(req, r, OutcomeMoved, from)
	}
}

// hashPick is the replica key's ring point leads to among those ok
// accepts (nil for none), after cfg.HashFallback.
func (c *Core) hashPick(key string, ok func(*replica) bool) *replica {
	if len(c.ring) == 0 {
		return nil
	}
	start := ringStart(c.ring, RingHash(key))
	if c.cfg.HashFallback == HashFirstHealthy {
		// vllm-router: the ring point's replica, else the first one
		// (in replica order) that may take the request.
		if cand := c.replicas[c.ring[start].url]; ok(cand) {
			return cand
		}
		for _, cand := range c.order {
			if ok(cand) {
				return cand
			}
		}
		return nil
	}
	for i := 0; i < len(c.ring); i++ {
		if cand := c.replicas[c.ring[(start+i)%len(c.ring)].url]; ok(cand) {
			return cand
		}
	}
	return nil
}
