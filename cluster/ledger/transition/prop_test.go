package transition

import (
	"errors"
	"testing"

	"pgregory.net/rapid"

	"github.com/asyncrl/asyncrl/messages"
)

// Random event streams against a naive reference of the rules: Apply
// accepts exactly what the reference accepts, and along any accepted
// history no prompt is trained twice and nothing follows a final state.
func TestApplyMatchesReference(t *testing.T) {
	states := []messages.LedgerState{consumed, trained, filtered, requeued}
	rapid.Check(t, func(t *rapid.T) {
		type ref struct {
			history []messages.PromptLedger
		}
		books := map[string]*ref{}
		stored := map[string]Entry{}
		n := rapid.IntRange(1, 60).Draw(t, "n")
		for range n {
			id := rapid.SampledFrom([]string{"p", "q"}).Draw(t, "prompt")
			ev := messages.PromptLedger{PromptID: id, State: rapid.SampledFrom(states).Draw(t, "state"),
				Attempt: int32(rapid.IntRange(0, 3).Draw(t, "attempt"))}
			ev.GroupID = id + string(rune('0'+ev.Attempt))
			r := books[id]
			if r == nil {
				r = &ref{}
				books[id] = r
			}
			// Reference: legal iff the state sequence follows the diagram.
			want := false
			dup := false
			if len(r.history) == 0 {
				want = ev.State == consumed
			} else {
				last := r.history[len(r.history)-1]
				dup = last.State == ev.State && last.Attempt == ev.Attempt && last.GroupID == ev.GroupID
				switch last.State {
				case consumed:
					want = ev.State != consumed && ev.Attempt == last.Attempt
				case requeued:
					want = ev.State == consumed && ev.Attempt > last.Attempt
				}
			}
			prev, exists := stored[id]
			next, out, err := Apply(prev, exists, ev)
			switch {
			case dup:
				if err != nil || out != Duplicate || next != prev {
					t.Fatalf("replay of %v: %v %v", ev, out, err)
				}
			case want:
				if err != nil || out != Applied {
					t.Fatalf("legal %v after %v refused: %v", ev, r.history, err)
				}
				stored[id] = next
				r.history = append(r.history, ev)
			default:
				if !errors.Is(err, ErrIllegalTransition) {
					t.Fatalf("illegal %v after %v accepted (%v)", ev, r.history, out)
				}
			}
		}
		for id, r := range books {
			trainedN := 0
			for i, e := range r.history {
				if e.State == trained {
					trainedN++
				}
				if (e.State == trained || e.State == filtered) && i != len(r.history)-1 {
					t.Fatalf("%s: something followed a final state: %v", id, r.history)
				}
			}
			if trainedN > 1 {
				t.Fatalf("%s trained %d times", id, trainedN)
			}
		}
	})
}
