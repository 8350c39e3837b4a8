package tracker

import (
	"errors"
	"testing"

	"pgregory.net/rapid"
)

// The tracker's stories are scenario files (scenario_test.go, testdata/);
// this file keeps the property test against a naive model.

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
