package rollout

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/actors/rollout/outcome"
	"github.com/asyncrl/asyncrl/messages"
)

// always answers every turn the same way.
type always struct{ out TurnOutput }

func (g always) Generate(context.Context, TurnRequest) (TurnOutput, error) { return g.out, nil }
func (always) FinishSession(context.Context, string) error                 { return nil }

// TestEnvFailuresPaceTheNextGroups: the outcome core's EnvBackoff through
// the real shell — groups whose environment keeps failing are each
// reported aborted (requeued, nothing lost), and every group after the
// first waits, the wait doubling: 50 ms, then 100 ms.
func TestEnvFailuresPaceTheNextGroups(t *testing.T) {
	bus, subj, aborted := abortsBus(t)
	task := &agentTask{fail: errors.New("tool server gone")}
	a, err := Start(bus, always{text("7", true, 0, "stop")}, Config{RunID: "r", Name: "rollout-0", Task: task,
		Episode: testCfg(), Concurrency: 1, Subjects: subj})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop(context.Background())
	for i, g := range []string{"g1", "g2", "g3"} {
		data, _ := messages.Encode(messages.PromptAssigned{Header: messages.Header{RunID: "r"}, PromptID: PromptID("p", int64(i)),
			GroupID: g, Text: "What is (2+3)*7?", NSamples: 1})
		if err := bus.Publish(context.Background(), subj.Prompts, data); err != nil {
			t.Fatal(err)
		}
		select {
		case ab := <-aborted:
			if ab.GroupID != g {
				t.Fatalf("aborted %v, want group %s", ab, g)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("group %s not reported aborted (stats %+v)", g, a.Stats())
		}
	}
	s := a.Stats()
	want := (outcome.DefaultEnvBackoff + 2*outcome.DefaultEnvBackoff).Milliseconds()
	if s.EnvErrors != 3 || s.GroupsAborted != 3 || s.EnvBackoffs != 2 || s.EnvBackoffMs != want {
		t.Errorf("stats %+v; want 3 env errors, 3 groups aborted, 2 waits of %d ms in all", s, want)
	}
}
