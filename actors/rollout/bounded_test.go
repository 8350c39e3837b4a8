package rollout

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// The actor keeps nothing per group once the group is published: a run of
// any length holds at most its groups in flight (the map of every group
// ever reported grew by one entry per group for the whole run). Each group
// is handed to OnReport exactly once.
func TestPerGroupStateBoundedByInFlight(t *testing.T) {
	bus, err := natsbus.Connect(context.Background(), natsbus.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	g := gated{release: make(chan struct{})}
	close(g.release)
	var mu sync.Mutex
	reported := map[string]int{}
	subj := Subjects{Prompts: "asyncrl.r.prompts", Groups: "asyncrl.r.groups", Aborted: "asyncrl.r.aborted"}
	a, err := Start(bus, g, Config{RunID: "r", Name: "rollout-0", Task: mustTask(t, "reverse"), Episode: testCfg(),
		Concurrency: 8, Subjects: subj, OnReport: func(group string, ready bool) {
			mu.Lock()
			defer mu.Unlock()
			if ready {
				reported[group]++
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop(context.Background())
	const groups = 200
	for i := range groups {
		id := "g" + strconv.Itoa(i)
		data, _ := messages.Encode(messages.PromptAssigned{Header: messages.Header{RunID: "r"}, PromptID: PromptID("p-"+id, 7),
			GroupID: id, Text: "rev ab=", NSamples: 2})
		if err := bus.Publish(context.Background(), subj.Prompts, data); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for a.Stats().GroupsReady < groups {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v", a.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	for a.tracked() > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := a.tracked(); n != 0 {
		t.Fatalf("the actor still holds %d per-group entries after all %d groups were published", n, groups)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reported) != groups {
		t.Fatalf("%d groups reported ready, want %d", len(reported), groups)
	}
	for id, n := range reported {
		if n != 1 {
			t.Fatalf("%s reported %d times", id, n)
		}
	}
}

// tracked counts the actor's per-group entries (every per-group map it
// holds belongs in this sum).
func (a *Actor) tracked() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.running)
}
