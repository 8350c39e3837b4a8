package policy

import (
	"fmt"
	"math"
	"math/rand"
	"sort"
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

// AddReplica adds a healthy, active replica serving version 0. With a
// minimum version above 0 it takes no sessions until SetVersion says it
// caught up.
func (c *Core) AddReplica(url string) error {
	if url == "" {
		return fmt.Errorf("%w: empty URL", ErrUnknownReplica)
	}
	if _, ok := c.replicas[url]; ok {
		return fmt.Errorf("%w: %s", ErrDuplicateReplica, url)
	}
	r := &replica{url: url, healthy: true, prefixes: newPrefixLRU(c.cfg.PrefixCacheEntries)}
	c.replicas[url] = r
	i := sort.Search(len(c.order), func(i int) bool { return c.order[i].url >= url })
	c.order = append(c.order, nil)
	copy(c.order[i+1:], c.order[i:])
	c.order[i] = r
	c.rebuildRing()
	return nil
}

// RemoveReplica removes a replica and forgets the sessions mapped to it
// (they are placed afresh on their next request).
func (c *Core) RemoveReplica(url string) error {
	r, ok := c.replicas[url]
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownReplica, url)
	}
	for k, s := range c.sessions {
		if s.replica == r {
			delete(c.sessions, k)
		}
	}
	delete(c.replicas, url)
	for i, o := range c.order {
		if o == r {
			c.order = append(c.order[:i], c.order[i+1:]...)
			break
		}
	}
	c.rebuildRing()
	return nil
}

// SetReplicas makes the replica set exactly urls: missing ones are added
// (healthy, active, version 0), absent ones removed, the rest kept as is.
func (c *Core) SetReplicas(urls []string) error {
	want := make(map[string]bool, len(urls))
	for _, u := range urls {
		want[u] = true
	}
	for _, r := range append([]*replica(nil), c.order...) {
		if !want[r.url] {
			if err := c.RemoveReplica(r.url); err != nil {
				return err
			}
		}
	}
	for _, u := range urls {
		if _, ok := c.replicas[u]; !ok {
			if err := c.AddReplica(u); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *Core) rebuildRing() {
	if c.cfg.Policy != ConsistentHash {
		return
	}
	urls := make([]string, len(c.order))
	for i, r := range c.order {
		urls[i] = r.url
	}
	c.ring = buildRing(urls, c.cfg.VirtualNodes)
}

func (c *Core) get(url string) (*replica, error) {
	r, ok := c.replicas[url]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrUnknownReplica, url)
	}
	return r, nil
}

// SetHealth marks a replica healthy or not. Sessions on an unhealthy
// replica are moved on their next request (SkyRL: stickiness breaks only
// then).
func (c *Core) SetHealth(url string, healthy bool) error {
	r, err := c.get(url)
	if err != nil {
		return err
	}
	r.healthy = healthy
	r.fails, r.oks = 0, 0
	return nil
}

// ObserveHealth applies one health signal and reports whether the
// replica's health changed. A failure — probe or proxied connection
// failure — counts toward FailThreshold consecutive failures; a success
// resets the failure streak, and only a successful probe (probe = true)
// counts toward RecoverThreshold: a replica is brought back by the
// checker, not by the odd request that happened to get through.
func (c *Core) ObserveHealth(url string, ok, probe bool) (changed bool, err error) {
	r, err := c.get(url)
	if err != nil {
		return false, err
	}
	if !ok {
		r.oks = 0
		r.fails++
		if r.healthy && r.fails >= c.cfg.FailThreshold {
			r.healthy = false
			return true, nil
		}
		return false, nil
	}
	r.fails = 0
	if !probe {
		return false, nil
	}
	r.oks++
	if !r.healthy && r.oks >= c.cfg.RecoverThreshold {
		r.healthy = true
		return true, nil
	}
	return false, nil
}

// SetState sets a replica's serving state (active, paused, updating,
// draining).
func (c *Core) SetState(url string, s State) error {
	r, err := c.get(url)
	if err != nil {
		return err
	}
	if s > Draining {
		return fmt.Errorf("policy: invalid state %d", s)
	}
	r.state = s
	return nil
}

// SetVersion records the weight version a replica serves (acknowledged).
func (c *Core) SetVersion(url string, v int64) error {
	r, err := c.get(url)
	if err != nil {
		return err
	}
	r.version = v
	return nil
}

// Version returns the weight version a replica serves, as last recorded
// by SetVersion (0 for a replica never told), and whether the replica is
// known. The proxy reads it to stamp responses with the versions a
// replica served while a request was on it.
func (c *Core) Version(url string) (int64, bool) {
	r, ok := c.replicas[url]
	if !ok {
		return 0, false
	}
	return r.version, true
}

// SetMinVersion sets the minimum version a replica must serve to take
// traffic.
func (c *Core) SetMinVersion(v int64) { c.minVersion = v }

// MinVersion returns the minimum version.
func (c *Core) MinVersion() int64 { return c.minVersion }

// ObserveMetrics records an engine's own queue length and KV usage (0–1)
// as scraped at now. bounded_sticky uses them while ≤ MetricsMaxAge old.
func (c *Core) ObserveMetrics(now time.Time, url string, queueLen int, kvUsage float64) error {
	r, err := c.get(url)
	if err != nil {
		return err
	}
	if queueLen < 0 {
		queueLen = 0
	}
	if !(kvUsage >= 0) { // also NaN
		kvUsage = 0
	}
	r.queueLen, r.kvUsage, r.metricsAt = queueLen, math.Min(kvUsage, 1), now
	return nil
}

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

func (c *Core) view(r *replica) ReplicaView {
	return ReplicaView{
		URL: r.url, Healthy: r.healthy, State: r.state, Version: r.version, Lag: c.newest - r.version,
		Sessions: r.sessions, InflightRequests: r.inflightReqs, InflightTokens: r.inflightTokens,
		QueueLen: r.queueLen, KVUsage: r.kvUsage, MetricsAt: r.metricsAt, Eligible: c.takesNew(r),
	}
}

// Replicas returns a snapshot of every replica, in URL order.
func (c *Core) Replicas() []ReplicaView {
	c.refresh()
	out := make([]ReplicaView, len(c.order))
	for i, r := range c.order {
		out[i] = c.view(r)
	}
	return out
}

// Replica returns a snapshot of one replica.
func (c *Core) Replica(url string) (ReplicaView, bool) {
	r, ok := c.replicas[url]
	if !ok {
		return ReplicaView{}, false
	}
	c.refresh()
	return c.view(r), true
}

// Lookup returns a snapshot of one session.
func (c *Core) Lookup(key string) (SessionView, bool) {
	s, ok := c.sessions[key]
	if !ok {
		return SessionView{}, false
	}
	return SessionView{Key: key, Replica: s.replica.url, LastAccess: s.lastAccess, PrefixHash: s.prefix}, true
}

// SessionCount returns the number of tracked sessions.
func (c *Core) SessionCount() int { return len(c.sessions) }

// Sessions returns every tracked session, sorted by key (for tests and
// debugging; O(n log n)).
func (c *Core) Sessions() []SessionView {
	out := make([]SessionView, 0, len(c.sessions))
	for k := range c.sessions {
		v, _ := c.Lookup(k)
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}
