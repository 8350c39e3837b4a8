package policy

import (
	"errors"
	"fmt"
	"math/rand"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newCore(t testing.TB, mut func(*Config), urls ...string) *Core {
	t.Helper()
	cfg := DefaultConfig()
	if mut != nil {
		mut(&cfg)
	}
	c, err := New(cfg, rand.New(rand.NewSource(1)))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetReplicas(urls); err != nil {
		t.Fatal(err)
	}
	return c
}

func policyIs(p string) func(*Config) { return func(c *Config) { c.Policy = p } }

func counts(c *Core) map[string]int {
	m := map[string]int{}
	for _, r := range c.Replicas() {
		m[r.URL] = r.Sessions
	}
	return m
}

type fataler interface {
	Helper()
	Fatalf(string, ...any)
}

// checkInvariants recounts sessions from the session table.
func checkInvariants(t fataler, c *Core) {
	t.Helper()
	recount := map[*replica]int{}
	for k, s := range c.sessions {
		if c.replicas[s.replica.url] != s.replica {
			t.Fatalf("session %s maps to removed replica %s", k, s.replica.url)
		}
		recount[s.replica]++
	}
	for _, r := range c.order {
		if r.sessions != recount[r] {
			t.Fatalf("replica %s: count %d, table has %d", r.url, r.sessions, recount[r])
		}
		if r.inflightReqs < 0 || r.inflightTokens < 0 {
			t.Fatalf("replica %s: negative in-flight", r.url)
		}
	}
	if len(c.order) != len(c.replicas) {
		t.Fatalf("order/map mismatch")
	}
}

var three = []string{"http://a", "http://b", "http://c"}

func TestStickyLeastLoadedReferenceCases(t *testing.T) {
	c := newCore(t, policyIs(StickyLeastLoaded), three...)
	// 3 sessions on 3 replicas → 1 each.
	got := map[string]string{}
	for _, s := range []string{"s1", "s2", "s3"} {
		d := c.Route(t0, Request{SessionKey: s})
		if d.Outcome != OutcomeNew || !d.OK() {
			t.Fatalf("%s: %+v", s, d)
		}
		got[s] = d.Replica
	}
	for u, n := range counts(c) {
		if n != 1 {
			t.Fatalf("replica %s has %d sessions, want 1 each: %v", u, n, counts(c))
		}
	}
	// Repeats stick, count stays 1.
	for i := 0; i < 3; i++ {
		d := c.Route(t0.Add(time.Second), Request{SessionKey: "s1"})
		if d.Replica != got["s1"] || d.Outcome != OutcomeStickyHit {
			t.Fatalf("repeat: %+v, want sticky on %s", d, got["s1"])
		}
	}
	if counts(c)[got["s1"]] != 1 {
		t.Fatalf("count after repeats: %v", counts(c))
	}
	if v, _ := c.Lookup("s1"); !v.LastAccess.Equal(t0.Add(time.Second)) {
		t.Fatalf("last access not refreshed: %v", v.LastAccess)
	}
	// Finish releases.
	if !c.Finish(t0, "s2") || c.Finish(t0, "s2") {
		t.Fatal("finish should succeed once")
	}
	if counts(c)[got["s2"]] != 0 || c.SessionCount() != 2 {
		t.Fatalf("after finish: %v", counts(c))
	}
	// Unhealthy replica forces reassignment: old 0, new 1.
	old := got["s1"]
	if err := c.SetHealth(old, false); err != nil {
		t.Fatal(err)
	}
	d := c.Route(t0, Request{SessionKey: "s1"})
	if d.Outcome != OutcomeMoved || d.From != old || d.Replica == old {
		t.Fatalf("unhealthy: %+v", d)
	}
	if counts(c)[old] != 0 || counts(c)[d.Replica] != 1 {
		t.Fatalf("counts after move: %v", counts(c))
	}
	checkInvariants(t, c)
}

func TestTTLSweep(t *testing.T) {
	c := newCore(t, func(cfg *Config) { cfg.Policy = StickyLeastLoaded; cfg.SessionTTL = 0 }, three...)
	c.Route(t0, Request{SessionKey: "x"})
	c.Route(t0, Request{SessionKey: "y"})
	if n := c.Sweep(t0.Add(61 * time.Second)); n != 2 || c.SessionCount() != 0 {
		t.Fatalf("TTL 0 sweep removed %d, left %d", n, c.SessionCount())
	}
	checkInvariants(t, c)

	c = newCore(t, policyIs(StickyLeastLoaded), three...)
	c.Sweep(t0) // first sweep
	c.Route(t0, Request{SessionKey: "old"})
	c.Route(t0.Add(7000*time.Second), Request{SessionKey: "young"})
	// Within 60 s of the last sweep nothing happens even if expired.
	c.lastSweep = t0.Add(7250 * time.Second)
	if n := c.Sweep(t0.Add(7300 * time.Second)); n != 0 {
		t.Fatalf("sweep ran within interval: %d", n)
	}
	if n := c.Sweep(t0.Add(7311 * time.Second)); n != 1 {
		t.Fatalf("sweep removed %d, want 1", n)
	}
	if _, ok := c.Lookup("old"); ok {
		t.Fatal("expired session survived")
	}
	if _, ok := c.Lookup("young"); !ok {
		t.Fatal("young session swept")
	}
	checkInvariants(t, c)
}

func TestStickyTieBreakIsRendezvous(t *testing.T) {
	c := newCore(t, policyIs(StickyLeastLoaded), three...)
	for i := 0; i < 50; i++ {
		key := fmt.Sprint("k", i)
		want, best := "", uint64(0)
		for _, u := range three {
			if w := rendezvous(key, u); want == "" || w > best {
				want, best = u, w
			}
		}
		d := c.Route(t0, Request{SessionKey: key})
		if d.Replica != want {
			t.Fatalf("%s → %s, want rendezvous winner %s", key, d.Replica, want)
		}
		c.Finish(t0, key)
	}
}

func TestUntracked(t *testing.T) {
	for _, p := range []string{StickyLeastLoaded, BoundedSticky} {
		c := newCore(t, policyIs(p), three...)
		c.Route(t0, Request{SessionKey: "a"})
		c.Route(t0, Request{SessionKey: "b"})
		d := c.Route(t0, Request{})
		if d.Outcome != OutcomeUntracked || counts(c)[d.Replica] != 0 || c.SessionCount() != 2 {
			t.Fatalf("%s: untracked %+v counts %v", p, d, counts(c))
		}
		d = c.Route(t0, Request{SessionKey: "body text", HashOnly: true})
		if d.Outcome != OutcomeUntracked || c.SessionCount() != 2 {
			t.Fatalf("%s: hash-only key tracked: %+v", p, d)
		}
	}
}

func TestConsistentHash(t *testing.T) {
	c := newCore(t, policyIs(ConsistentHash), three...)
	if len(c.ring) != 3*160 {
		t.Fatalf("ring has %d points", len(c.ring))
	}
	// Same key, same replica; the replica is the first ring point ≥ hash.
	for i := 0; i < 100; i++ {
		key := fmt.Sprint("key-", i)
		want := c.ring[ringStart(c.ring, RingHash(key))].url
		d1 := c.Route(t0, Request{SessionKey: key})
		d2 := c.Route(t0, Request{SessionKey: key})
		if d1.Replica != want || d2.Replica != want || d2.Outcome != OutcomeStickyHit {
			t.Fatalf("%s: %v %v want %s", key, d1, d2, want)
		}
	}
	// A dead replica's keys go to the NEXT ring point's replica, so they
	// spread over both survivors rather than one fallback.
	dead := "http://b"
	_ = c.SetHealth(dead, false)
	moved := map[string]int{}
	for i := 0; i < 300; i++ {
		key := fmt.Sprint("spread-", i)
		start := ringStart(c.ring, RingHash(key))
		if c.ring[start].url != dead {
			continue
		}
		want := ""
		for j := 1; j < len(c.ring); j++ {
			if u := c.ring[(start+j)%len(c.ring)].url; u != dead {
				want = u
				break
			}
		}
		d := c.Route(t0, Request{SessionKey: key})
		if d.Replica != want {
			t.Fatalf("%s → %s, want next point %s", key, d.Replica, want)
		}
		moved[d.Replica]++
	}
	if len(moved) != 2 {
		t.Fatalf("dead replica's keys went to %v, want both survivors", moved)
	}
	// Hash-only keys are placed but not tracked.
	n := c.SessionCount()
	d := c.Route(t0, Request{SessionKey: "some body", HashOnly: true})
	if d.Outcome != OutcomeUntracked || !d.OK() || c.SessionCount() != n {
		t.Fatalf("hash-only: %+v", d)
	}
	checkInvariants(t, c)
}

func TestVersionGating(t *testing.T) {
	for _, p := range []string{StickyLeastLoaded, BoundedSticky, ConsistentHash} {
		t.Run(p, func(t *testing.T) {
			// move: the session is reassigned when its replica lags.
			c := newCore(t, policyIs(p), three...)
			for _, u := range three {
				_ = c.SetVersion(u, 1)
			}
			c.SetMinVersion(1)
			d := c.Route(t0, Request{SessionKey: "s"})
			home := d.Replica
			c.SetMinVersion(2)
			for _, u := range three {
				if u != home {
					_ = c.SetVersion(u, 2)
				}
			}
			d = c.Route(t0, Request{SessionKey: "s"})
			if d.Outcome != OutcomeMoved || d.Replica == home || d.From != home {
				t.Fatalf("move: %+v", d)
			}
			// New sessions never land on the lagging replica.
			for i := 0; i < 30; i++ {
				if d := c.Route(t0, Request{SessionKey: fmt.Sprint(i)}); d.Replica == home {
					t.Fatalf("new session on lagging replica")
				}
			}
			checkInvariants(t, c)

			// hold: gated until the replica catches up.
			c = newCore(t, func(cfg *Config) { cfg.Policy = p; cfg.LagRule = LagHold }, three...)
			d = c.Route(t0, Request{SessionKey: "s"})
			home = d.Replica
			_ = c.SetState(home, Updating)
			d = c.Route(t0.Add(time.Second), Request{SessionKey: "s"})
			if d.Outcome != OutcomeGated || d.OK() || d.From != home {
				t.Fatalf("hold: %+v", d)
			}
			if v, _ := c.Lookup("s"); v.Replica != home {
				t.Fatalf("held session moved to %s", v.Replica)
			}
			_ = c.SetState(home, Active)
			if d = c.Route(t0, Request{SessionKey: "s"}); d.Outcome != OutcomeStickyHit || d.Replica != home {
				t.Fatalf("after catch-up: %+v", d)
			}
			// Unhealthy beats hold: the session moves.
			_ = c.SetHealth(home, false)
			if d = c.Route(t0, Request{SessionKey: "s"}); d.Outcome != OutcomeMoved || d.Replica == home {
				t.Fatalf("unhealthy under hold: %+v", d)
			}
			checkInvariants(t, c)
		})
	}
}

func TestDrainingKeepsSessionsTakesNoNew(t *testing.T) {
	c := newCore(t, policyIs(StickyLeastLoaded), three...)
	home := c.Route(t0, Request{SessionKey: "s"}).Replica
	_ = c.SetState(home, Draining)
	if d := c.Route(t0, Request{SessionKey: "s"}); d.Replica != home || d.Outcome != OutcomeStickyHit {
		t.Fatalf("draining dropped its session: %+v", d)
	}
	for i := 0; i < 20; i++ {
		if c.Route(t0, Request{SessionKey: fmt.Sprint(i)}).Replica == home {
			t.Fatal("new session on draining replica")
		}
	}
}

func TestNoReplica(t *testing.T) {
	for _, p := range Policies {
		c := newCore(t, policyIs(p))
		if d := c.Route(t0, Request{SessionKey: "s"}); d.Outcome != OutcomeNoReplica || d.OK() {
			t.Fatalf("%s empty: %+v", p, d)
		}
		c = newCore(t, policyIs(p), "http://a")
		c.Route(t0, Request{SessionKey: "s"})
		_ = c.SetHealth("http://a", false)
		if d := c.Route(t0, Request{SessionKey: "s"}); d.Outcome != OutcomeNoReplica || d.OK() {
			t.Fatalf("%s unhealthy: %+v", p, d)
		}
		if d := c.Route(t0, Request{}); d.OK() {
			t.Fatalf("%s untracked: %+v", p, d)
		}
		checkInvariants(t, c)
	}
}

func TestBoundedStickySpillsOnSessions(t *testing.T) {
	c := newCore(t, policyIs(BoundedSticky), "http://a")
	for i := 0; i < 8; i++ {
		c.Route(t0, Request{SessionKey: fmt.Sprint("s", i)})
	}
	_ = c.AddReplica("http://b")
	// 8 sessions on a, 0 on b: cap = ⌈1.25·8/2⌉ = 5, so a's sessions spill
	// one by one until a holds 5.
	spilled := 0
	for i := 0; i < 8; i++ {
		d := c.Route(t0, Request{SessionKey: fmt.Sprint("s", i)})
		if d.Outcome == OutcomeSpilled {
			spilled++
			if d.From != "http://a" || d.Replica != "http://b" {
				t.Fatalf("spill: %+v", d)
			}
		}
	}
	if got := counts(c); got["http://a"] != 5 || got["http://b"] != 3 || spilled != 3 {
		t.Fatalf("after spills: %v (%d spilled)", got, spilled)
	}
	checkInvariants(t, c)
}

func TestBoundedStickyLoadAndMetrics(t *testing.T) {
	c := newCore(t, policyIs(BoundedSticky), "http://a", "http://b")
	a := c.Route(t0, Request{SessionKey: "x", PromptTokens: 100})
	b := c.Route(t0, Request{SessionKey: "y", PromptTokens: 100})
	if a.Replica == b.Replica {
		t.Fatalf("equal load should split: %v %v", a, b)
	}
	c.Done(t0, a.Replica, a.Tokens)
	c.Done(t0, b.Replica, b.Tokens)
	if v, _ := c.Replica(a.Replica); v.InflightTokens != 0 || v.InflightRequests != 0 {
		t.Fatalf("Done did not release: %+v", v)
	}
	// Fresh metrics: x's replica has a long engine queue, but both hold one
	// session: moving x would only trade places (MoveCost > 0), so it stays.
	_ = c.ObserveMetrics(t0, a.Replica, 50, 0.9)
	d := c.Route(t0.Add(500*time.Millisecond), Request{SessionKey: "x", PromptTokens: 10})
	if d.Outcome != OutcomeStickyHit {
		t.Fatalf("1 vs 1 session: should stay: %+v", d)
	}
	c.Done(t0, d.Replica, d.Tokens)
	// A second session w next to x (b briefly down so w lands on a), and
	// y finishes: 2 sessions vs 0. Now x spills to b: the queue saved
	// exceeds its 10-token history and b ends with fewer sessions than a.
	_ = c.SetHealth(b.Replica, false)
	if wd := c.Route(t0, Request{SessionKey: "w"}); wd.Replica != a.Replica {
		t.Fatalf("setup: w on %s", wd.Replica)
	} else {
		c.Done(t0, wd.Replica, wd.Tokens)
	}
	_ = c.SetHealth(b.Replica, true)
	c.Finish(t0, "y")
	d = c.Route(t0.Add(500*time.Millisecond), Request{SessionKey: "x", PromptTokens: 10})
	if d.Outcome != OutcomeSpilled || d.Replica != b.Replica {
		t.Fatalf("fresh metrics, 2 vs 0 sessions: should spill: %+v", d)
	}
	c.Done(t0, d.Replica, d.Tokens)
	// Stale metrics (> 1 s) are ignored: with w, w2, w3 on a and x on b, a
	// stale scrape claiming a is swamped must not move w (a fresh one
	// would: 3 vs 1 sessions, a huge queue, a 0-token history).
	_ = c.SetHealth(b.Replica, false)
	for _, k := range []string{"w2", "w3"} {
		wd := c.Route(t0, Request{SessionKey: k})
		c.Done(t0, wd.Replica, wd.Tokens)
	}
	_ = c.SetHealth(b.Replica, true)
	_ = c.ObserveMetrics(t0, a.Replica, 500, 1)
	d = c.Route(t0.Add(2*time.Second), Request{SessionKey: "w", PromptTokens: 10})
	if d.Outcome != OutcomeStickyHit {
		t.Fatalf("stale metrics used: %+v", d)
	}
	c.Done(t0, d.Replica, d.Tokens)
	_ = c.ObserveMetrics(t0.Add(2*time.Second), a.Replica, 500, 1)
	d = c.Route(t0.Add(2*time.Second), Request{SessionKey: "w", PromptTokens: 10})
	if d.Outcome != OutcomeSpilled || d.Replica != b.Replica {
		t.Fatalf("fresh metrics, 3 vs 1 sessions: should spill: %+v", d)
	}
	// New sessions go to the least loaded (in-flight tokens) replica.
	c.Done(t0, d.Replica, d.Tokens)
	for _, k := range []string{"x", "w", "w2", "w3"} {
		c.Finish(t0, k)
	}
	big := c.Route(t0.Add(4*time.Second), Request{PromptTokens: 5000}) // a's scrape is stale by now
	n := c.Route(t0.Add(4*time.Second), Request{SessionKey: "z"})
	if n.Replica == big.Replica {
		t.Fatalf("new session went to the busy replica %s", big.Replica)
	}
}

func TestBoundedStickyPrefersPrefixHolderOnMove(t *testing.T) {
	urls := []string{"http://a", "http://b", "http://c", "http://d"}
	c := newCore(t, policyIs(BoundedSticky), urls...)
	for i := 0; i < 8; i++ { // two background sessions per replica
		c.Route(t0, Request{SessionKey: fmt.Sprint("bg", i)})
	}
	// Two samples of one GRPO group share prefix P and land apart.
	const P = 0xfeed
	home := c.Route(t0, Request{SessionKey: "g1", PrefixHash: P}).Replica
	sib := c.Route(t0, Request{SessionKey: "g2", PrefixHash: P}).Replica
	if sib == home {
		t.Fatal("siblings on one replica; test setup assumption broken")
	}
	// g1's replica dies. By load and sessions alone g1 would go to one of
	// the two replicas with 2 sessions; the sibling's replica (3 sessions,
	// still within the cap ⌈1.25·8/3⌉ = 4) holds the prefix and wins.
	_ = c.SetHealth(home, false)
	d := c.Route(t0, Request{SessionKey: "g1"})
	if d.Outcome != OutcomeMoved || d.Replica != sib {
		t.Fatalf("move should prefer the prefix holder %s: %+v", sib, d)
	}
	checkInvariants(t, c)

	// The spill path: overload one replica with sessions so g spills, and
	// give one target the prefix.
	c2 := newCore(t, policyIs(BoundedSticky), "http://a")
	c2.Route(t0, Request{SessionKey: "g", PrefixHash: P})
	for i := 0; i < 7; i++ {
		c2.Route(t0, Request{SessionKey: fmt.Sprint("o", i)})
	}
	for _, u := range []string{"http://b", "http://c", "http://d"} {
		_ = c2.AddReplica(u)
	}
	// c has seen prefix P (an untracked request with that prefix), b and d
	// have not; b would win on rendezvous/URL order otherwise.
	_ = c2.SetHealth("http://b", false)
	_ = c2.SetHealth("http://d", false)
	c2.Route(t0, Request{PrefixHash: P}) // goes to c, the only idle eligible
	c2.Done(t0, "http://c", 0)
	_ = c2.SetHealth("http://b", true)
	_ = c2.SetHealth("http://d", true)
	d = c2.Route(t0, Request{SessionKey: "g"})
	if d.Outcome != OutcomeSpilled || d.Replica != "http://c" {
		t.Fatalf("spill should prefer prefix holder c: %+v", d)
	}
}

func TestRoundRobinAndLeastRequest(t *testing.T) {
	c := newCore(t, policyIs(RoundRobin), three...)
	_ = c.SetHealth("http://b", false)
	var got []string
	for i := 0; i < 4; i++ {
		got = append(got, c.Route(t0, Request{SessionKey: "s"}).Replica)
	}
	if fmt.Sprint(got) != "[http://a http://c http://a http://c]" || c.SessionCount() != 0 {
		t.Fatalf("round robin: %v", got)
	}
	c = newCore(t, policyIs(LeastRequest), three...)
	d1 := c.Route(t0, Request{})
	d2 := c.Route(t0, Request{})
	d3 := c.Route(t0, Request{})
	if d1.Replica == d2.Replica || d2.Replica == d3.Replica || d1.Replica == d3.Replica {
		t.Fatalf("least request reused a busy replica: %v %v %v", d1, d2, d3)
	}
	c.Done(t0, d2.Replica, 0)
	if d := c.Route(t0, Request{}); d.Replica != d2.Replica {
		t.Fatalf("least request: %v want %s", d, d2.Replica)
	}
}

func TestReplicaAdmin(t *testing.T) {
	c := newCore(t, policyIs(StickyLeastLoaded), three...)
	if err := c.AddReplica("http://a"); !errors.Is(err, ErrDuplicateReplica) {
		t.Fatalf("dup: %v", err)
	}
	for _, err := range []error{c.RemoveReplica("http://z"), c.SetHealth("http://z", true), c.SetVersion("http://z", 1),
		c.SetState("http://z", Paused), c.ObserveMetrics(t0, "http://z", 1, 1)} {
		if !errors.Is(err, ErrUnknownReplica) {
			t.Fatalf("unknown: %v", err)
		}
	}
	home := c.Route(t0, Request{SessionKey: "s"}).Replica
	if err := c.RemoveReplica(home); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Lookup("s"); ok {
		t.Fatal("session survived its replica's removal")
	}
	if d := c.Route(t0, Request{SessionKey: "s"}); d.Replica == home || !d.OK() {
		t.Fatalf("after remove: %+v", d)
	}
	c.Done(t0, home, 10) // removed replica: ignored, no panic
	checkInvariants(t, c)
	if _, err := ParseState("draining"); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseState("bogus"); err == nil {
		t.Fatal("ParseState accepted bogus")
	}
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name string
		mut  func(*Config)
	}{
		{"Policy", func(c *Config) { c.Policy = "random" }},
		{"VirtualNodes", func(c *Config) { c.VirtualNodes = 0 }},
		{"SessionTTL", func(c *Config) { c.SessionTTL = -1 }},
		{"LoadFactor", func(c *Config) { c.LoadFactor = 0.9 }},
		{"LagRule", func(c *Config) { c.LagRule = "wait" }},
		{"PrefixCacheEntries", func(c *Config) { c.PrefixCacheEntries = -1 }},
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		cfg := DefaultConfig()
		tc.mut(&cfg)
		err := cfg.Validate()
		if !errors.Is(err, ErrInvalidConfig) || !containsStr(err.Error(), tc.name) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

func containsStr(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func TestPrefixLRU(t *testing.T) {
	l := newPrefixLRU(2)
	l.touch(1, 1)
	l.touch(2, 2)
	l.touch(1, 3) // 1 is now most recent
	l.touch(3, 4) // evicts 2
	if _, ok := l.get(2); ok {
		t.Fatal("2 should be evicted")
	}
	if s, ok := l.get(1); !ok || s != 3 {
		t.Fatalf("1: %d %v", s, ok)
	}
	if l.len() != 2 {
		t.Fatalf("len %d", l.len())
	}
}

func TestOutcomeNames(t *testing.T) {
	want := []string{"sticky_hit", "new", "moved", "spilled", "gated", "untracked", "no_replica"}
	for i, o := range Outcomes {
		if o.String() != want[i] {
			t.Fatalf("%d: %s", i, o)
		}
	}
}

func TestAvoidMovesAndExcludes(t *testing.T) {
	for _, p := range []string{StickyLeastLoaded, BoundedSticky, ConsistentHash, RoundRobin, LeastRequest} {
		c := newCore(t, func(cfg *Config) { cfg.Policy = p; cfg.LagRule = LagHold }, three...)
		first := c.Route(t0, Request{SessionKey: "s"})
		d := c.Route(t0, Request{SessionKey: "s", Avoid: []string{first.Replica}})
		if !d.OK() || d.Replica == first.Replica {
			t.Fatalf("%s: avoid ignored: %+v", p, d)
		}
		if p != RoundRobin && p != LeastRequest && d.Outcome != OutcomeMoved {
			t.Fatalf("%s: want moved, got %+v", p, d)
		}
		// The flag is per call: the avoided replica is eligible again.
		if v, _ := c.Replica(first.Replica); !v.Eligible {
			t.Fatalf("%s: avoid leaked past the call", p)
		}
		checkInvariants(t, c)
	}
}

// New sessions go by count first: a replica whose sessions happen to be
// lighter in work must not take a ninth session while another has seven.
func TestBoundedStickyNewSessionsByCountThenWork(t *testing.T) {
	c := newCore(t, policyIs(BoundedSticky), "http://a", "http://b")
	// a: one long session in flight; b: two short ones.
	c.Route(t0, Request{SessionKey: "long", PromptTokens: 8000})
	for c.Replicas()[0].Sessions+c.Replicas()[1].Sessions < 3 {
		c.Route(t0, Request{SessionKey: fmt.Sprint("short", c.SessionCount()), PromptTokens: 100})
	}
	va, _ := c.Replica("http://a")
	vb, _ := c.Replica("http://b")
	if va.Sessions+vb.Sessions != 3 || va.Sessions == vb.Sessions {
		t.Fatalf("setup: %+v %+v", va, vb)
	}
	fewer, more := va, vb
	if vb.Sessions < va.Sessions {
		fewer, more = vb, va
	}
	if fewer.InflightTokens <= more.InflightTokens {
		t.Skip("setup did not make the emptier replica the busier one")
	}
	d := c.Route(t0, Request{SessionKey: "new", PromptTokens: 100})
	if d.Replica != fewer.URL {
		t.Fatalf("new session went to %s (%d sessions) instead of %s (%d sessions, more work)", d.Replica, more.Sessions, fewer.URL, fewer.Sessions)
	}
	// Among equal counts, the least work wins.
	c2 := newCore(t, policyIs(BoundedSticky), "http://a", "http://b")
	c2.Route(t0, Request{PromptTokens: 5000}) // untracked, charges work only
	busy := c2.Replicas()[0].URL
	if c2.Replicas()[1].InflightTokens > 0 {
		busy = c2.Replicas()[1].URL
	}
	if d := c2.Route(t0, Request{SessionKey: "z", PromptTokens: 10}); d.Replica == busy {
		t.Fatalf("equal counts: new session went to the busier %s", busy)
	}
}

// A sticky hit is charged only the prompt beyond the history its replica
// already caches; a new session is charged its whole prompt.
func TestBoundedStickyChargesUncachedTokens(t *testing.T) {
	c := newCore(t, policyIs(BoundedSticky), "http://a", "http://b")
	d := c.Route(t0, Request{SessionKey: "s", PromptTokens: 1000, ExpectedDecodeTokens: 100})
	if d.Outcome != OutcomeNew || d.Tokens != 1100 {
		t.Fatalf("first turn: %+v", d)
	}
	c.Done(t0, d.Replica, d.Tokens)
	d = c.Route(t0, Request{SessionKey: "s", PromptTokens: 1250, ExpectedDecodeTokens: 100})
	if d.Outcome != OutcomeStickyHit || d.Tokens != 150+100 {
		t.Fatalf("second turn should be charged 1250−1100 prompt + 100 decode: %+v", d)
	}
}

// When the fleet drains (sessions finish, the averages fall) a replica
// still running its last sessions is over the session bound, but moving
// one would re-prefill its whole history to save almost nothing: with
// MoveCost 1 the sessions stay; with MoveCost 0 (the old rule) they spill.
func TestBoundedStickyNoSpillWhenFleetDrains(t *testing.T) {
	for _, tc := range []struct {
		moveCost float64
		spills   bool
	}{{1, false}, {0, true}} {
		cfg := DefaultConfig()
		cfg.MoveCost = tc.moveCost
		c, err := New(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range []string{"http://a", "http://b", "http://c", "http://d"} {
			_ = c.AddReplica(u)
		}
		// 16 sessions, 4 per replica, each with a 12k-token history.
		where := map[string]string{}
		for i := 0; i < 16; i++ {
			k := fmt.Sprint("s", i)
			d := c.Route(t0, Request{SessionKey: k, PromptTokens: 12000, ExpectedDecodeTokens: 100})
			c.Done(t0, d.Replica, d.Tokens)
			where[k] = d.Replica
		}
		// Every session on b, c and d finishes, and one on a.
		left := []string{}
		for k, u := range where {
			if u != "http://a" {
				c.Finish(t0, k)
			} else {
				left = append(left, k)
			}
		}
		c.Finish(t0, left[0])
		left = left[1:]
		// a holds 3 of 3 sessions: cap = ⌈1.25·3/4⌉ = 1.
		spilled := 0
		for _, k := range left {
			d := c.Route(t0, Request{SessionKey: k, PromptTokens: 12250, ExpectedDecodeTokens: 100})
			if d.Outcome == OutcomeSpilled {
				spilled++
			}
			c.Done(t0, d.Replica, d.Tokens)
		}
		if (spilled > 0) != tc.spills {
			t.Fatalf("MoveCost %v: %d spills, want spills=%v", tc.moveCost, spilled, tc.spills)
		}
	}
}

// A moved session goes where the longest run of its prompt's leading
// blocks was sent, not merely to a replica holding the shared first
// blocks (a system prompt every conversation starts with), and not by
// recency: b got the shared blocks last, c holds this conversation's.
func TestBoundedStickyPrefersLongestBlockMatch(t *testing.T) {
	c := newCore(t, policyIs(BoundedSticky), "http://a", "http://b", "http://c")
	sys := []uint64{11, 12}              // shared system prompt blocks
	conv := []uint64{11, 12, 31, 32}     // this conversation
	fork := []uint64{11, 12, 31, 32, 41} // a sibling forked from it
	_ = c.SetHealth("http://b", false)
	_ = c.SetHealth("http://c", false)
	d := c.Route(t0, Request{SessionKey: "s", PrefixBlocks: conv, PromptTokens: 100})
	c.Done(t0, d.Replica, d.Tokens)
	_ = c.SetHealth("http://c", true)
	_ = c.SetHealth("http://a", false)
	d = c.Route(t0, Request{SessionKey: "sib", PrefixBlocks: fork, PromptTokens: 100})
	if d.Replica != "http://c" {
		t.Fatalf("setup: sibling on %s", d.Replica)
	}
	c.Done(t0, d.Replica, d.Tokens)
	// b is sent the system prompt last (so recency would pick b).
	_ = c.SetHealth("http://b", true)
	_ = c.SetHealth("http://c", false)
	d = c.Route(t0, Request{PrefixBlocks: sys, PromptTokens: 10})
	c.Done(t0, d.Replica, d.Tokens)
	_ = c.SetHealth("http://c", true)
	// a is down: s moves; c holds 4 of its blocks, b 2.
	d = c.Route(t0, Request{SessionKey: "s", PrefixBlocks: append(conv[:4:4], 33), PromptTokens: 120})
	if d.Outcome != OutcomeMoved || d.Replica != "http://c" {
		t.Fatalf("move should go to the longest match c: %+v", d)
	}
	// Control: a session with only the shared blocks goes by work, sessions
	// and rendezvous (b holds no session, c holds two).
	_ = c.SetHealth("http://a", false)
	d = c.Route(t0, Request{SessionKey: "other", PrefixBlocks: sys, PromptTokens: 10})
	if d.Replica != "http://b" {
		t.Fatalf("new session with shared blocks only: %+v", d)
	}
}

// TestConsistentHashFirstHealthyFallback is vllm-router's fallback
// (vllm-project/router src/policies/consistent_hash.rs,
// select_worker_with_headers: "Target worker is unhealthy, fall back to
// first healthy worker", healthy_indices[0]): every key whose ring point's
// replica is down goes to the first healthy replica — one hot spot —
// where the default walk spreads them over the ring.
func TestConsistentHashFirstHealthyFallback(t *testing.T) {
	for _, tc := range []struct {
		fallback string
		want     map[string]bool // where the dead replica's keys may go
		spread   int             // how many replicas they must reach
	}{
		{HashFirstHealthy, map[string]bool{"http://a": true}, 1},
		{HashWalk, map[string]bool{"http://a": true, "http://c": true}, 2},
	} {
		t.Run(tc.fallback, func(t *testing.T) {
			c := newCore(t, func(cfg *Config) { cfg.Policy = ConsistentHash; cfg.HashFallback = tc.fallback }, three...)
			_ = c.SetHealth("http://b", false)
			got := map[string]int{}
			for i := range 300 {
				key := fmt.Sprint("k-", i)
				owner := c.ring[ringStart(c.ring, RingHash(key))].url
				d := c.Route(t0, Request{SessionKey: key})
				if owner != "http://b" {
					if d.Replica != owner {
						t.Fatalf("%s: %v, want its ring owner %s", key, d, owner)
					}
					continue
				}
				if !tc.want[d.Replica] {
					t.Fatalf("%s (owner down) → %v", key, d)
				}
				got[d.Replica]++
			}
			if len(got) != tc.spread {
				t.Fatalf("dead replica's keys went to %v, want %d replica(s)", got, tc.spread)
			}
			// The owner recovers: its keys go back (no session table in
			// vllm-router's consistent_hash; ours follows the ring too).
			_ = c.SetHealth("http://b", true)
			for i := range 300 {
				key := fmt.Sprint("k-", i)
				if owner := c.ring[ringStart(c.ring, RingHash(key))].url; owner == "http://b" {
					if d := c.Route(t0, Request{SessionKey: key}); d.Replica != owner || d.Outcome != OutcomeMoved {
						t.Fatalf("%s after recovery: %v", key, d)
					}
				}
			}
			checkInvariants(t, c)
		})
	}
}
