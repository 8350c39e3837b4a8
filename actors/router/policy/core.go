package policy

import (
	"math/rand"
	"time"
)

// Core is the routing policy state machine. It is not safe for concurrent
// use: the proxy (the shell) serialises calls. It never blocks, sleeps,
// reads the clock or does I/O; time and randomness are inputs.
type Core struct {
	cfg        Config
	rng        *rand.Rand // tie-breaks for untracked requests; nil = first in URL order
	replicas   map[string]*replica
	order      []*replica // sorted by URL, for deterministic scans
	ring       []ringPoint
	sessions   map[string]*session
	minVersion int64
	// newest and newFloor are derived by refresh at the start of every
	// Route and snapshot: the newest version any replica acknowledged, and
	// the lowest version that may take new sessions now.
	newest, newFloor int64
	lastSweep        time.Time
	swept            bool
	rr               int    // round_robin cursor
	seq              uint64 // logical time for prefix LRUs
}

type replica struct {
	url            string
	healthy        bool
	state          State
	version        int64
	sessions       int
	inflightReqs   int
	inflightTokens int64
	queueLen       int
	kvUsage        float64
	metricsAt      time.Time
	prefixes       *prefixLRU
	avoid          bool // set only during one Route call (Request.Avoid)
	fails, oks     int  // consecutive health signals (ObserveHealth)
}

type session struct {
	replica    *replica
	lastAccess time.Time
	prefix     uint64
	// history estimates the tokens of this session its replica holds in
	// KV cache: the last request's prompt plus its expected reply. A
	// sticky hit is charged only the prompt beyond it; a move loses it.
	history int64
}

// New returns a Core with no replicas. rng breaks ties between equally
// loaded replicas for requests without a session key (keyed requests use
// rendezvous hashing); nil picks the first in URL order.
func New(cfg Config, rng *rand.Rand) (*Core, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Core{cfg: cfg, rng: rng, replicas: make(map[string]*replica), sessions: make(map[string]*session)}, nil
}

// Config returns the configuration the core was built with.
func (c *Core) Config() Config { return c.cfg }

// ---- replica set -------------------------------------------------------

// ---- eligibility and load ----------------------------------------------

// budget is how many versions a replica may lag behind the newest
// acknowledged one and keep its sessions (0 under VersionNewest).
func (c *Core) budget() int64 {
	if c.cfg.VersionRule == VersionNewest {
		return 0
	}
	return c.cfg.MaxVersionLag
}

// refresh derives newest and newFloor from the replicas (O(n), once per
// Route: cheaper to recompute than to keep right through every setter).
// New sessions go to up-to-date replicas while one of them could take
// them; only when none can (down, paused, avoided) does the floor drop to
// the staleness budget, so a publish never turns into "no replica".
func (c *Core) refresh() {
	c.newest = c.minVersion
	for _, r := range c.order {
		c.newest = max(c.newest, r.version)
	}
	c.newFloor = max(c.minVersion, c.newest-c.budget())
	for _, r := range c.order {
		if r.healthy && !r.avoid && r.state == Active && r.version >= c.newest {
			c.newFloor = c.newest
			break
		}
	}
}

// takesNew: may receive new sessions and untracked requests: healthy,
// active, at or above the hard minimum and at the new-session floor (the
// newest version while an up-to-date replica can take them). Valid after
// refresh.
func (c *Core) takesNew(r *replica) bool {
	return r.healthy && !r.avoid && r.state == Active && r.version >= c.minVersion && r.version >= c.newFloor
}

// keepsExisting: may keep serving the sessions it already has. A draining
// replica does, and so does one whose lag behind the newest acknowledged
// version is within the staleness budget; a paused or updating one, one
// beyond the budget or below the hard minimum does not (lag rule).
func (c *Core) keepsExisting(r *replica) bool {
	return r.healthy && !r.avoid && (r.state == Active || r.state == Draining) &&
		r.version >= c.minVersion && c.newest-r.version <= c.budget()
}

// load is the bounded_sticky load in token-equivalents: router-local
// in-flight tokens plus, when fresh, the engine's queue and KV pressure.
func (c *Core) load(now time.Time, r *replica) float64 {
	l := float64(r.inflightTokens)
	if !r.metricsAt.IsZero() && now.Sub(r.metricsAt) <= c.cfg.MetricsMaxAge {
		l += c.cfg.QueueTokens*float64(r.queueLen) + c.cfg.KVTokens*r.kvUsage
	}
	return l
}

// ---- routing -----------------------------------------------------------

// Route decides where one request goes and updates the bookkeeping: the
// session table, per-replica session counts, in-flight requests and
// tokens (until Done), and prefix LRUs. It may run a TTL sweep (at most
// every SweepInterval).
func (c *Core) Route(now time.Time, req Request) Decision {
	c.Sweep(now)
	if len(req.Avoid) > 0 {
		for _, u := range req.Avoid {
			if r := c.replicas[u]; r != nil {
				r.avoid = true
			}
		}
		defer func() {
			for _, u := range req.Avoid {
				if r := c.replicas[u]; r != nil {
					r.avoid = false
				}
			}
		}()
	}
	c.refresh()
	return c.route(now, req)
}

func (c *Core) route(now time.Time, req Request) Decision {
	tracked := req.SessionKey != "" && !req.HashOnly
	switch c.cfg.Policy {
	case RoundRobin:
		return c.charge(req, c.pickRoundRobin(), OutcomeUntracked, "")
	case LeastRequest:
		return c.charge(req, c.pickLeastRequest(), OutcomeUntracked, "")
	case ConsistentHash:
		return c.routeHash(now, req, tracked)
	}
	if !tracked {
		return c.charge(req, c.pickNew(now, req, ""), OutcomeUntracked, "")
	}
	key := req.SessionKey
	s := c.sessions[key]
	if s == nil {
		r := c.pickNew(now, req, key)
		if r == nil {
			return Decision{Outcome: OutcomeNoReplica}
		}
		c.bind(now, key, req, r)
		return c.charge(req, r, OutcomeNew, "")
	}
	r := s.replica
	if c.keepsExisting(r) {
		s.lastAccess = now
		if c.cfg.Policy == BoundedSticky {
			if t := c.spillTarget(now, req, key, s); t != nil {
				if req.PrefixHash == 0 {
					req.PrefixHash = s.prefix
				}
				c.unbind(key)
				c.bind(now, key, req, t)
				return c.charge(req, t, OutcomeSpilled, r.url)
			}
		}
		if req.PrefixHash != 0 {
			s.prefix = req.PrefixHash
		}
		cached := s.history
		s.history = reqTokens(req)
		return c.chargeCached(req, r, OutcomeStickyHit, "", cached)
	}
	if r.healthy && !r.avoid && c.cfg.LagRule == LagHold {
		s.lastAccess = now // a held session is alive; do not let TTL take it
		return Decision{Outcome: OutcomeGated, From: r.url}
	}
	prefix := s.prefix
	c.unbind(key)
	if req.PrefixHash == 0 {
		req.PrefixHash = prefix
	}
	t := c.moveTarget(now, req, key)
	if t == nil {
		return Decision{Outcome: OutcomeNoReplica, From: r.url}
	}
	c.bind(now, key, req, t)
	return c.charge(req, t, OutcomeMoved, r.url)
}

// reqTokens is a request's prompt plus expected decode tokens.
func reqTokens(req Request) int64 {
	return int64(max(req.PromptTokens, 0)) + int64(max(req.ExpectedDecodeTokens, 0))
}

// charge records an in-flight request on r and returns the decision.
func (c *Core) charge(req Request, r *replica, o Outcome, from string) Decision {
	return c.chargeCached(req, r, o, from, 0)
}

// chargeCached is charge for a request whose first cached prompt tokens
// r already holds (a sticky hit: the session's previous turn). Only the
// rest is work for r — prefilling a 12k-token history that is already in
// KV cache costs the engine almost nothing — so only the rest is charged.
func (c *Core) chargeCached(req Request, r *replica, o Outcome, from string, cached int64) Decision {
	if r == nil {
		return Decision{Outcome: OutcomeNoReplica, From: from}
	}
	tok := max(int64(max(req.PromptTokens, 0))-max(cached, 0), 0) + int64(max(req.ExpectedDecodeTokens, 0))
	r.inflightReqs++
	r.inflightTokens += tok
	if req.PrefixHash != 0 || len(req.PrefixBlocks) > 0 {
		c.seq++
		if req.PrefixHash != 0 {
			r.prefixes.touch(req.PrefixHash, c.seq)
		}
		for _, h := range req.PrefixBlocks {
			r.prefixes.touch(h, c.seq)
		}
	}
	return Decision{Replica: r.url, Outcome: o, From: from, Tokens: tok}
}

func (c *Core) bind(now time.Time, key string, req Request, r *replica) {
	c.sessions[key] = &session{replica: r, lastAccess: now, prefix: req.PrefixHash, history: reqTokens(req)}
	r.sessions++
}

func (c *Core) unbind(key string) {
	if s, ok := c.sessions[key]; ok {
		s.replica.sessions--
		delete(c.sessions, key)
	}
}

// Done records that a request routed to url finished, releasing the
// in-flight request and the tokens its Decision charged.
func (c *Core) Done(now time.Time, url string, tokens int64) {
	r, ok := c.replicas[url]
	if !ok {
		return // removed meanwhile: nothing to release
	}
	r.inflightReqs = max(r.inflightReqs-1, 0)
	r.inflightTokens = max(r.inflightTokens-tokens, 0)
}

// Finish releases a session (POST /finish_session). It reports whether
// the session was known.
func (c *Core) Finish(now time.Time, key string) bool {
	if _, ok := c.sessions[key]; !ok {
		return false
	}
	c.unbind(key)
	return true
}

// Sweep forgets sessions idle for longer than SessionTTL. It does nothing
// if the last sweep was less than SweepInterval ago, and returns the
// number of sessions removed.
func (c *Core) Sweep(now time.Time) int {
	if c.swept && now.Sub(c.lastSweep) < c.cfg.SweepInterval {
		return 0
	}
	c.swept, c.lastSweep = true, now
	n := 0
	for k, s := range c.sessions {
		if now.Sub(s.lastAccess) > c.cfg.SessionTTL {
			s.replica.sessions--
			delete(c.sessions, k)
			n++
		}
	}
	return n
}

// ---- views -------------------------------------------------------------
