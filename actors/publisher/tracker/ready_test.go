package tracker

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestReadyProperties checks the two decisions Ready carries against a
// naive model of the engines, after every call of a random sequence:
//   - the router's minimum never falls, is only ever raised to a version
//     some engine serves, and is MinRoutable whenever some engine serves
//     MinRoutable (no raise is missed);
//   - an awaited version settles Routable only while some engine serves
//     it, NoEngine only while every engine serves less and failed it,
//     and stays awaited exactly while neither holds.
func TestReadyProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		tr, _ := New(Config{MaxLag: rapid.Int64Range(0, 2).Draw(rt, "lag")})
		type eng struct{ serving, failed int64 }
		model := map[string]*eng{}
		engines := []string{"e0", "e1", "e2"}
		prevMin := int64(0)
		awaited := map[int64]bool{} // the model's versions a caller waits on
		for range rapid.IntRange(1, 60).Draw(rt, "ops") {
			e := rapid.SampledFrom(engines).Draw(rt, "e")
			v := rapid.Int64Range(0, tr.Target()).Draw(rt, "v")
			switch rapid.IntRange(0, 5).Draw(rt, "op") {
			case 0:
				if _, err := tr.PublishAwait(VersionInfo{Version: tr.Target() + 1}); err != nil {
					rt.Fatal(err)
				}
				awaited[tr.Target()] = true
			case 1:
				from := rapid.Int64Range(NoVersion, tr.Target()).Draw(rt, "from")
				if _, err := tr.Join(e, from); err != nil {
					rt.Fatal(err)
				}
				model[e] = &eng{serving: from, failed: NoVersion}
			case 2:
				if ok, _ := tr.Ack(e, v); ok {
					model[e].serving = v
				}
			case 3:
				if tr.Failed(e, v) == nil {
					model[e].failed = max(model[e].failed, v)
				}
			case 4:
				tr.Leave(e)
				delete(model, e)
			case 5:
				if err := tr.Await(v); err != nil {
					rt.Fatal(err)
				}
				awaited[v] = true
			}
			serves := func(v int64) bool {
				for _, m := range model {
					if m.serving >= v {
						return true
					}
				}
				return false
			}
			noEngine := func(v int64) bool {
				for _, m := range model {
					if m.serving >= v || m.failed < v {
						return false
					}
				}
				return true
			}
			rd := tr.Ready()
			tr.Advance()
			if rd.MinVersion != NoVersion && (rd.MinVersion <= prevMin || !serves(rd.MinVersion) || rd.MinVersion != tr.RouterMin()) {
				rt.Fatalf("%s after router min %d (now %d)", rd, prevMin, tr.RouterMin())
			}
			if tr.RouterMin() < prevMin || tr.RouterMin() != prevMin && rd.MinVersion == NoVersion {
				rt.Fatalf("router min %d after %d, not through Ready", tr.RouterMin(), prevMin)
			}
			prevMin = tr.RouterMin()
			if serves(tr.MinRoutable()) && tr.RouterMin() != tr.MinRoutable() {
				rt.Fatalf("router min %d: an engine serves min routable %d", tr.RouterMin(), tr.MinRoutable())
			}
			for _, s := range rd.Settled {
				if s.Outcome == Routable && !serves(s.Version) || s.Outcome == NoEngine && !noEngine(s.Version) {
					rt.Fatalf("version %d settled %s; model %v", s.Version, s.Outcome, model)
				}
				if !awaited[s.Version] {
					rt.Fatalf("version %d settled %s but nobody awaited it", s.Version, s.Outcome)
				}
				delete(awaited, s.Version)
			}
			// Nothing awaited is dropped: every version a caller waits on is
			// either settled above or still awaited.
			if got := tr.Awaiting(); len(got) != len(awaited) || slices.ContainsFunc(got, func(v int64) bool { return !awaited[v] }) {
				rt.Fatalf("awaiting %v; the callers wait on %v", got, awaited)
			}
			for _, a := range tr.Awaiting() {
				if serves(a) || noEngine(a) {
					rt.Fatalf("version %d still awaited; model %v", a, model)
				}
			}
			if !slices.IsSorted(tr.Awaiting()) {
				rt.Fatalf("awaiting %v", tr.Awaiting())
			}
		}
	})
}
