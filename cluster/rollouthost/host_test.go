package rollouthost

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/cluster/internal/clustertest"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/internal/syncbuf"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/tasks"
	"github.com/asyncrl/asyncrl/transport"
)

// A rollout host that could not join a term (its trajectory buffer would
// not open: here the holder has not made it yet, in a cluster a JetStream
// leader election) joins it on the term's next announcement instead of
// idling for the rest of the term. Rollout hosts bind the buffer the
// holder made; they never create it.
func TestRolloutHostRetriesTermItCouldNotFollow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bus := clustertest.EmbeddedBus(t)
	cfg := config.Default()
	cfg.Run.ID = "rr"
	cfg.Run.DataDir = t.TempDir()
	term := cfg.Run.ID + "-t3"
	s, err := transport.Plan(term)
	if err != nil {
		t.Fatal(err)
	}
	var events syncbuf.Buffer
	task, err := tasks.Get(cfg.Rollout.Task)
	if err != nil {
		t.Fatal(err)
	}
	h, err := Start(Config{Run: cfg, Task: task, Node: "n2", Bus: bus, Logger: zerolog.Nop(),
		Event: func(format string, args ...any) { fmt.Fprintf(&events, format+"\n", args...) }})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Stop()
	subj := transport.MustPlan(cfg.Run.ID).TermAnnounce
	announce := func() { // what the holder's term sends once a second
		t.Helper()
		data, err := messages.Encode(messages.TermAnnounce{Header: messages.Header{RunID: cfg.Run.ID, Sender: "n1"},
			Term: term, Token: 3, Router: "http://127.0.0.1:1"})
		if err != nil {
			t.Fatal(err)
		}
		if err := bus.Publish(ctx, subj, data); err != nil {
			t.Fatal(err)
		}
	}
	announce()
	clustertest.WaitFor(t, 15*time.Second, "the host to fail to follow the term", func() bool {
		return strings.Contains(events.String(), "rollouts cannot follow term "+term)
	})
	if _, err := bus.Stream(ctx, GroupStream(s, 1)); err != nil { // the holder makes the buffer
		t.Fatal(err)
	}
	announce()
	clustertest.WaitFor(t, 15*time.Second, "the host to follow the term on its next announcement", func() bool {
		return strings.Contains(events.String(), "rollouts follow term "+term)
	})
	n := len(h.Actors())
	if n == 0 {
		t.Error("the host follows the term with no rollout actors")
	}
}
