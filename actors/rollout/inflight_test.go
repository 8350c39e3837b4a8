package rollout

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// gated blocks every Generate until release is closed, then answers EOS.
type gated struct{ release chan struct{} }

func (g gated) Generate(ctx context.Context, _ TurnRequest) (TurnOutput, error) {
	select {
	case <-g.release:
	case <-ctx.Done():
		return TurnOutput{}, ctx.Err()
	}
	return text("a", true, 0, "stop"), nil
}
func (gated) FinishSession(context.Context, string) error { return nil }

// InFlight lists a group from the moment the actor takes it (OnTake is
// called then) until its outcome is published: what a cluster node reports so the trainer's
// holder can requeue a dead node's groups.
func TestInFlightUntilPublished(t *testing.T) {
	bus, err := natsbus.Connect(context.Background(), natsbus.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	g := gated{release: make(chan struct{})}
	taken := make(chan string, 4)
	subj := Subjects{Prompts: "asyncrl.r.prompts", Groups: "asyncrl.r.groups", Aborted: "asyncrl.r.aborted"}
	a, err := Start(bus, g, Config{RunID: "r", Name: "rollout-0", Task: mustTask(t, "reverse"), Episode: testCfg(),
		Concurrency: 4, Subjects: subj, OnTake: func(group, _ string) { taken <- group }})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop(context.Background())
	ready := make(chan string, 4)
	if _, err := bus.Subscribe(subj.Groups, func(m *transport.Msg) {
		gr, err := messages.DecodeAs[messages.GroupReady](m.Data)
		if err == nil {
			ready <- gr.GroupID
		}
	}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"g2", "g1"} {
		data, _ := messages.Encode(messages.PromptAssigned{Header: messages.Header{RunID: "r"}, PromptID: PromptID("p-"+id, 7),
			GroupID: id, Text: "rev ab=", NSamples: 2})
		if err := bus.Publish(context.Background(), subj.Prompts, data); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		gs, ps := a.InFlight()
		if slices.Equal(gs, []string{"g1", "g2"}) {
			if ps[0] != PromptID("p-g1", 7) || ps[1] != PromptID("p-g2", 7) {
				t.Fatalf("prompts %v", ps)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("in flight %v; want [g1 g2] while the episodes run (stats %+v)", gs, a.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := map[string]bool{<-taken: true, <-taken: true}; !got["g1"] || !got["g2"] {
		t.Fatalf("OnTake saw %v", got)
	}
	close(g.release)
	got := map[string]bool{<-ready: true, <-ready: true}
	if !got["g1"] || !got["g2"] {
		t.Fatalf("published %v", got)
	}
	deadline = time.Now().Add(5 * time.Second)
	for gs, _ := a.InFlight(); len(gs) != 0; gs, _ = a.InFlight() {
		if time.Now().After(deadline) {
			t.Fatalf("still in flight after publishing: %v", gs)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
