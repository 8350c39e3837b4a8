package tracker

import (
	"errors"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

func mustNew(t *testing.T, cfg Config) *Tracker {
	t.Helper()
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func publish(t *testing.T, tr *Tracker, infos ...VersionInfo) []Command {
	t.Helper()
	var all []Command
	for _, in := range infos {
		cmds, err := tr.Publish(in)
		if err != nil {
			t.Fatal(err)
		}
		all = cmds
	}
	return all
}

func TestPlanPicksCheaperPath(t *testing.T) {
	cases := []struct {
		name     string
		base     int64
		versions []VersionInfo
		from     int64
		want     string
	}{
		{"up to date", 1000, []VersionInfo{{Version: 1, DeltaBytes: 10}}, 1, "plan from=1 target=1 bytes=0"},
		{"replay deltas", 1000, []VersionInfo{{Version: 1, DeltaBytes: 10}, {Version: 2, DeltaBytes: 20}, {Version: 3, DeltaBytes: 30}}, 0,
			"plan from=0 target=3 deltas=1,2,3 bytes=60"},
		{"full is cheaper than many deltas", 1000, []VersionInfo{{Version: 1, DeltaBytes: 400}, {Version: 2, DeltaBytes: 400, FullBytes: 500}, {Version: 3, DeltaBytes: 50}}, 0,
			"plan from=0 target=3 full=2 deltas=3 bytes=550"},
		{"deltas win a tie", 1000, []VersionInfo{{Version: 1, DeltaBytes: 300}, {Version: 2, DeltaBytes: 200, FullBytes: 500}}, 0,
			"plan from=0 target=2 deltas=1,2 bytes=500"},
		{"no weights: base plus deltas", 100, []VersionInfo{{Version: 1, DeltaBytes: 10}, {Version: 2, DeltaBytes: 10}}, NoVersion,
			"plan from=-1 target=2 full=0 deltas=1,2 bytes=120"},
		{"no weights: newest full", 1000, []VersionInfo{{Version: 1, DeltaBytes: 300}, {Version: 2, DeltaBytes: 300, FullBytes: 900}}, NoVersion,
			"plan from=-1 target=2 full=2 bytes=900"},
		{"an older full can beat the newest", 1000, []VersionInfo{{Version: 1, DeltaBytes: 5, FullBytes: 600}, {Version: 2, DeltaBytes: 5, FullBytes: 2000}}, NoVersion,
			"plan from=-1 target=2 full=1 deltas=2 bytes=605"},
		{"a full at or below `from` is useless", 1000, []VersionInfo{{Version: 1, DeltaBytes: 5, FullBytes: 1}, {Version: 2, DeltaBytes: 900}}, 1,
			"plan from=1 target=2 deltas=2 bytes=900"},
		{"no delta: the full checkpoint however cheap the delta would be", 1000, []VersionInfo{{Version: 1, FullBytes: 500, NoDelta: true}}, 0,
			"plan from=0 target=1 full=1 bytes=500"},
		{"no delta: nothing below it counts, deltas after it do", 1000, []VersionInfo{{Version: 1, DeltaBytes: 1, FullBytes: 2},
			{Version: 2, FullBytes: 800, NoDelta: true}, {Version: 3, DeltaBytes: 10}}, 0,
			"plan from=0 target=3 full=2 deltas=3 bytes=810"},
		{"no delta on every version: the newest full", 1000, []VersionInfo{{Version: 1, FullBytes: 7, NoDelta: true},
			{Version: 2, FullBytes: 7, NoDelta: true}, {Version: 3, FullBytes: 7, NoDelta: true}}, 1,
			"plan from=1 target=3 full=3 bytes=7"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := mustNew(t, Config{BaseBytes: c.base})
			publish(t, tr, c.versions...)
			cmd, err := tr.Join("e", c.from)
			if err != nil {
				t.Fatal(err)
			}
			if got := cmd.Plan.String(); got != c.want {
				t.Fatalf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}

// TestNoDeltaNeedsAFull: a version no delta reaches must have a full
// checkpoint, or no engine could ever load it; the refusal changes nothing.
func TestNoDeltaNeedsAFull(t *testing.T) {
	tr := mustNew(t, DefaultConfig())
	if _, err := tr.Publish(VersionInfo{Version: 1, NoDelta: true}); err == nil {
		t.Fatal("a NoDelta version without a full checkpoint was accepted")
	}
	if tr.Target() != 0 || tr.MinRoutable() != 0 {
		t.Fatalf("the refused publish moved the tracker: target %d, min %d", tr.Target(), tr.MinRoutable())
	}
}

func TestAcksGateRouting(t *testing.T) {
	tr := mustNew(t, DefaultConfig())
	for _, e := range []string{"a", "b"} {
		if _, err := tr.Join(e, 0); err != nil {
			t.Fatal(err)
		}
	}
	if got := tr.RoutableEngines(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("routable at v0: %v", got)
	}
	cmds := publish(t, tr, VersionInfo{Version: 1, DeltaBytes: 7})
	if len(cmds) != 2 || cmds[0].Engine != "a" || cmds[1].Engine != "b" || !slices.Equal(cmds[0].Plan.Deltas, []int64{1}) {
		t.Fatalf("commands after publish: %+v", cmds)
	}
	if tr.MinRoutable() != 1 || len(tr.RoutableEngines()) != 0 {
		t.Fatalf("min %d, routable %v: no engine acked v1 yet", tr.MinRoutable(), tr.RoutableEngines())
	}
	if err := tr.Fetching("a", 1); err != nil {
		t.Fatal(err)
	}
	if st := tr.Engines()[0]; st.Fetching != 1 || st.Serving != 0 || st.Routable {
		t.Fatalf("a while fetching: %+v", st)
	}
	if ok, err := tr.Ack("a", 1); !ok || err != nil {
		t.Fatalf("ack a@1 = %v, %v", ok, err)
	}
	if got := tr.RoutableEngines(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("routable after a acked: %v", got)
	}
	if st := tr.Engines()[0]; st.Fetching != NoVersion {
		t.Fatalf("fetching not cleared by the ack: %+v", st)
	}
	// A late, duplicate or lower ack is ignored and counted.
	if ok, _ := tr.Ack("a", 1); ok {
		t.Fatal("duplicate ack accepted")
	}
	if ok, _ := tr.Ack("a", 0); ok {
		t.Fatal("lower ack accepted")
	}
	if tr.IgnoredAcks() != 2 || !tr.Routable("a") {
		t.Fatalf("ignored %d, a routable %v", tr.IgnoredAcks(), tr.Routable("a"))
	}
	// Bad input is an error and changes nothing.
	if _, err := tr.Ack("a", 2); !errors.Is(err, ErrUnknownVersion) {
		t.Fatalf("ack of an unpublished version: %v", err)
	}
	if _, err := tr.Ack("zz", 1); !errors.Is(err, ErrUnknownEngine) {
		t.Fatalf("ack from an unknown engine: %v", err)
	}
	if _, err := tr.Publish(VersionInfo{Version: 3}); !errors.Is(err, ErrVersionOrder) {
		t.Fatalf("publish skipping 2: %v", err)
	}
	tr.Leave("a")
	if tr.Routable("a") || len(tr.Engines()) != 1 {
		t.Fatal("a left but is still tracked")
	}
}

func TestMaxLagKeepsLaggardsRoutable(t *testing.T) {
	tr := mustNew(t, Config{MaxLag: 2})
	tr.Join("slow", 0)
	publish(t, tr, VersionInfo{Version: 1}, VersionInfo{Version: 2})
	if !tr.Routable("slow") || tr.MinRoutable() != 0 {
		t.Fatalf("2 behind with MaxLag 2 must stay routable (min %d)", tr.MinRoutable())
	}
	publish(t, tr, VersionInfo{Version: 3})
	if tr.Routable("slow") || tr.MinRoutable() != 1 {
		t.Fatalf("3 behind with MaxLag 2 must not be routable (min %d)", tr.MinRoutable())
	}
}

func TestAddFullChangesPlan(t *testing.T) {
	tr := mustNew(t, Config{BaseBytes: 1000})
	publish(t, tr, VersionInfo{Version: 1, DeltaBytes: 600}, VersionInfo{Version: 2, DeltaBytes: 600})
	tr.Join("new", NoVersion)
	if p, _ := tr.Plan("new"); p.Full != 0 || p.Bytes != 2200 {
		t.Fatalf("before the full: %s", p)
	}
	if err := tr.AddFull(2, 1000); err != nil {
		t.Fatal(err)
	}
	if p, _ := tr.Plan("new"); p.Full != 2 || len(p.Deltas) != 0 || p.Bytes != 1000 {
		t.Fatalf("after the full: %s", p)
	}
	if err := tr.AddFull(3, 10); !errors.Is(err, ErrUnknownVersion) {
		t.Fatalf("full of an unpublished version: %v", err)
	}
}

// TestTrackerProperties checks random operation sequences against a naive
// model: served versions only increase, ignored acks are counted exactly,
// routing matches the definition, and every plan is a valid path whose
// cost is the minimum over all paths.
func TestTrackerProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		lag := rapid.Int64Range(0, 3).Draw(rt, "lag")
		base := rapid.Int64Range(1, 500).Draw(rt, "base")
		tr, _ := New(Config{MaxLag: lag, BaseBytes: base})
		type ver struct{ delta, full int64 }
		vers := []ver{{0, base}}
		serving := map[string]int64{}
		var ignored int64
		engines := []string{"e0", "e1", "e2"}
		for range rapid.IntRange(1, 60).Draw(rt, "ops") {
			switch rapid.IntRange(0, 4).Draw(rt, "op") {
			case 0:
				in := VersionInfo{Version: int64(len(vers)), DeltaBytes: rapid.Int64Range(0, 300).Draw(rt, "d")}
				if rapid.Bool().Draw(rt, "hasFull") {
					in.FullBytes = rapid.Int64Range(1, 800).Draw(rt, "f")
				}
				if _, err := tr.Publish(in); err != nil {
					rt.Fatal(err)
				}
				vers = append(vers, ver{in.DeltaBytes, in.FullBytes})
			case 1:
				e := rapid.SampledFrom(engines).Draw(rt, "e")
				v := rapid.Int64Range(NoVersion, int64(len(vers))-1).Draw(rt, "v")
				if _, err := tr.Join(e, v); err != nil {
					rt.Fatal(err)
				}
				serving[e] = v
			case 2, 3:
				e := rapid.SampledFrom(engines).Draw(rt, "e")
				v := rapid.Int64Range(0, int64(len(vers))-1).Draw(rt, "v")
				ok, err := tr.Ack(e, v)
				cur, known := serving[e]
				switch {
				case !known:
					if !errors.Is(err, ErrUnknownEngine) {
						rt.Fatalf("ack from unknown %s: %v", e, err)
					}
				case v <= cur:
					ignored++
					if ok || err != nil {
						rt.Fatalf("ack %s@%d at %d: %v %v", e, v, cur, ok, err)
					}
				default:
					if !ok || err != nil {
						rt.Fatalf("ack %s@%d at %d refused: %v", e, v, cur, err)
					}
					serving[e] = v
				}
			case 4:
				e := rapid.SampledFrom(engines).Draw(rt, "e")
				tr.Leave(e)
				delete(serving, e)
			}
			target := int64(len(vers)) - 1
			min := max(0, target-lag)
			if tr.MinRoutable() != min || tr.IgnoredAcks() != ignored {
				rt.Fatalf("min %d want %d, ignored %d want %d", tr.MinRoutable(), min, tr.IgnoredAcks(), ignored)
			}
			for _, st := range tr.Engines() {
				if st.Serving != serving[st.Engine] || st.Routable != (st.Serving >= min) {
					rt.Fatalf("%+v, model serves %d, min %d", st, serving[st.Engine], min)
				}
				p, _ := tr.Plan(st.Engine)
				// Brute force: the cheapest path.
				best := int64(-1)
				cost := func(from int64) (c int64) {
					for v := from + 1; v <= target; v++ {
						c += vers[v].delta
					}
					return c
				}
				if st.Serving >= 0 {
					best = cost(st.Serving)
				}
				for f := st.Serving + 1; f <= target; f++ {
					if f >= 0 && vers[f].full > 0 {
						if c := vers[f].full + cost(f); best < 0 || c < best {
							best = c
						}
					}
				}
				if st.Serving == target {
					best = 0
				}
				if p.Bytes != best {
					rt.Fatalf("%s: plan %s, cheapest is %d", st.Engine, p, best)
				}
				// The path is valid: start, then consecutive deltas to target.
				at := st.Serving
				if p.Full != NoVersion {
					if p.Full <= st.Serving || vers[p.Full].full == 0 {
						rt.Fatalf("plan %s loads an unusable full", p)
					}
					at = p.Full
				}
				for _, d := range p.Deltas {
					if d != at+1 {
						rt.Fatalf("plan %s skips from %d to %d", p, at, d)
					}
					at = d
				}
				if at != target {
					rt.Fatalf("plan %s ends at %d, not %d", p, at, target)
				}
			}
		}
	})
}
