package policy

import (
	"fmt"
	"testing"
)

// TestVersionRule is the issue-15 rule: a replica behind the newest
// acknowledged version keeps its sessions while its lag is within the
// staleness budget (MaxVersionLag), takes no new sessions while an
// up-to-date replica can, and loses a session only when it is unhealthy,
// beyond the budget, or below the hard minimum (MinVersionSet).
func TestVersionRule(t *testing.T) {
	cases := []struct {
		name           string
		mut            func(*Config)
		homeV, otherV  int64 // versions acked after the session was placed
		min            int64
		homeDown       bool
		want           Outcome
		homeTakesNewOK bool // new sessions may land on home afterwards
	}{
		{name: "another replica acks v1: home keeps its session", homeV: 0, otherV: 1, want: OutcomeStickyHit},
		{name: "lag equal to the budget keeps it", homeV: 0, otherV: 4, want: OutcomeStickyHit},
		{name: "lag beyond the budget moves it", homeV: 0, otherV: 5, want: OutcomeMoved},
		{name: "below the hard minimum moves it even within budget", homeV: 1, otherV: 2, min: 2, want: OutcomeMoved},
		{name: "unhealthy within budget moves it", homeV: 0, otherV: 1, homeDown: true, want: OutcomeMoved},
		{name: "home is newest", homeV: 2, otherV: 1, want: OutcomeStickyHit, homeTakesNewOK: true},
		{name: "all caught up", homeV: 3, otherV: 3, want: OutcomeStickyHit, homeTakesNewOK: true},
		{name: "budget 2, lag 3", mut: func(c *Config) { c.MaxVersionLag = 2 }, homeV: 0, otherV: 3, want: OutcomeMoved},
		{name: "budget 0 is the newest rule", mut: func(c *Config) { c.MaxVersionLag = 0 }, homeV: 0, otherV: 1, want: OutcomeMoved},
		{name: "rule newest (before issue 15)", mut: func(c *Config) { c.VersionRule = VersionNewest }, homeV: 0, otherV: 1, want: OutcomeMoved},
		{name: "beyond the budget under hold is gated", mut: func(c *Config) { c.LagRule = LagHold }, homeV: 0, otherV: 5, want: OutcomeGated},
	}
	for _, p := range []string{StickyLeastLoaded, BoundedSticky, ConsistentHash} {
		for _, tc := range cases {
			t.Run(p+"/"+tc.name, func(t *testing.T) {
				c := newCore(t, func(cfg *Config) {
					cfg.Policy = p
					if tc.mut != nil {
						tc.mut(cfg)
					}
				}, three...)
				home := c.Route(t0, Request{SessionKey: "s"}).Replica
				for _, u := range three {
					v := tc.otherV
					if u == home {
						v = tc.homeV
					}
					if err := c.SetVersion(u, v); err != nil {
						t.Fatal(err)
					}
				}
				c.SetMinVersion(tc.min)
				if tc.homeDown {
					_ = c.SetHealth(home, false)
				}
				d := c.Route(t0, Request{SessionKey: "s"})
				if d.Outcome != tc.want {
					t.Fatalf("session on %s (v%d, others v%d, min %d): %v, want %s", home, tc.homeV, tc.otherV, tc.min, d, tc.want)
				}
				if tc.want == OutcomeMoved && (d.Replica == home || d.From != home) {
					t.Fatalf("moved: %v", d)
				}
				if !tc.homeTakesNewOK {
					for i := range 30 {
						if d := c.Route(t0, Request{SessionKey: fmt.Sprint("new-", i)}); d.Replica == home {
							t.Fatalf("new session %d on lagging %s: %v", i, home, d)
						}
					}
				}
				checkInvariants(t, c)
			})
		}
	}
}

// TestVersionRuleFallsBackToLaggingForNew: while no up-to-date replica can
// take a new session (the only one is down), a replica within the budget
// takes it instead of the request failing.
func TestVersionRuleFallsBackToLaggingForNew(t *testing.T) {
	c := newCore(t, policyIs(StickyLeastLoaded), three...)
	_ = c.SetVersion("http://a", 2)
	_ = c.SetVersion("http://b", 1)
	_ = c.SetVersion("http://c", 1)
	if d := c.Route(t0, Request{SessionKey: "x"}); d.Replica != "http://a" {
		t.Fatalf("new session not on the up-to-date replica: %v", d)
	}
	_ = c.SetHealth("http://a", false)
	d := c.Route(t0, Request{SessionKey: "y"})
	if d.Outcome != OutcomeNew || (d.Replica != "http://b" && d.Replica != "http://c") {
		t.Fatalf("with the newest replica down: %v, want a lagging one within budget", d)
	}
	// x moves (its replica is unhealthy) to a lagging one too.
	if d := c.Route(t0, Request{SessionKey: "x"}); d.Outcome != OutcomeMoved || d.Replica == "http://a" {
		t.Fatalf("x: %v", d)
	}
	// Beyond the budget nobody may take it.
	c.SetMinVersion(0)
	_ = c.SetVersion("http://a", 9)
	if d := c.Route(t0, Request{SessionKey: "z"}); d.Outcome != OutcomeNoReplica {
		t.Fatalf("beyond budget: %v", d)
	}
	if v, _ := c.Replica("http://b"); v.Lag != 8 || v.Eligible {
		t.Fatalf("view of b: %+v", v)
	}
}
