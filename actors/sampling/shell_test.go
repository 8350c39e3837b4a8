package sampling

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/actors"
	"github.com/asyncrl/asyncrl/actors/filter"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// TestBufferForwardsReferencesAndReleases: on a real JetStream trajectory
// buffer, a kept group goes to the controller as a reference to its
// stored message (subject, sequence, the rollout's size and checksum; no
// bytes), and that message stays readable after the sampling actor acked
// it — until the controller's ledger settles the group, which deletes it.
// A filtered group is deleted once the ledger says filtered; a ledger
// entry of another state deletes nothing.
func TestBufferForwardsReferencesAndReleases(t *testing.T) {
	ctx := context.Background()
	bus, err := natsbus.Connect(ctx, natsbus.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	const subj = "asyncrl.r.trajectories"
	st, err := bus.Stream(ctx, transport.StreamConfig{Name: "groups-r", Subjects: []string{subj}, Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	sys, err := actors.NewSystem(actors.DefaultSystemConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sys.Shutdown(ctx) }()
	fc := filter.DefaultConfig()
	fc.NSamplesPerPrompt = 2
	a, err := SpawnBuffer(sys, bus, actors.DefaultShellConfig("sampling-0", "sampling"),
		Config{Filter: fc, RunID: "r", Sender: "s", Kept: "K", Filtered: "F"}, Buffer{Stream: st, Ledger: "L"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Stop(ctx) }()
	kept := make(chan messages.GroupReady, 4)
	filtered := make(chan messages.GroupFiltered, 4)
	if _, err := bus.Subscribe("K", func(m *transport.Msg) {
		if g, err := messages.DecodeAs[messages.GroupReady](m.Data); err == nil {
			kept <- g
		}
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := bus.Subscribe("F", func(m *transport.Msg) {
		if g, err := messages.DecodeAs[messages.GroupFiltered](m.Data); err == nil {
			filtered <- g
		}
	}); err != nil {
		t.Fatal(err)
	}
	store := func(group string, rewards ...float64) (uint64, messages.BatchRef) {
		arrow := []byte("arrow of " + group)
		b := messages.InlineRef(arrow)
		data, err := messages.Encode(messages.GroupReady{Header: messages.Header{RunID: "r"}, GroupID: group, PromptID: "p-" + group, Rewards: rewards, Batch: b})
		if err != nil {
			t.Fatal(err)
		}
		seq, err := st.Publish(ctx, subj, data)
		if err != nil {
			t.Fatal(err)
		}
		return seq, b
	}
	sr := st.(transport.StoredReader)
	gone := func(seq uint64) bool {
		_, err := sr.GetMsg(ctx, seq)
		return errors.Is(err, transport.ErrNoMessage)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	ledger := func(group string, state messages.LedgerState) {
		data, _ := messages.Encode(messages.PromptLedger{Header: messages.Header{RunID: "r"}, GroupID: group, PromptID: "p-" + group, State: state})
		if err := bus.Publish(ctx, "L", data); err != nil {
			t.Fatal(err)
		}
	}

	seqA, b := store("a", 1, 0)
	var g messages.GroupReady
	select {
	case g = <-kept:
	case <-time.After(10 * time.Second):
		t.Fatal("no kept group")
	}
	want := messages.BatchRef{Subject: subj, Seq: seqA, Bytes: b.Bytes, Checksum: b.Checksum}
	if g.GroupID != "a" || len(g.Batch.Inline) != 0 || g.Batch.Subject != want.Subject || g.Batch.Seq != want.Seq ||
		g.Batch.Bytes != want.Bytes || g.Batch.Checksum != want.Checksum {
		t.Fatalf("kept %s with batch %+v; want a reference %+v and no bytes", g.GroupID, g.Batch, want)
	}
	if got, err := sr.GetMsg(ctx, seqA); err != nil {
		t.Fatalf("the referenced group after its ack: %v (a reference must outlive the sampling ack)", err)
	} else if p, err := g.Batch.Resolve("a", got.Data); err != nil || string(p) != "arrow of a" {
		t.Fatalf("resolving the reference: %q, %v", p, err)
	}

	seqB, _ := store("b", 1, 1) // zero variance: filtered
	select {
	case f := <-filtered:
		if f.GroupID != "b" {
			t.Fatalf("filtered %s, want b", f.GroupID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no filtered group")
	}
	ledger("a", messages.LedgerConsumed) // not a settlement
	ledger("b", messages.LedgerFiltered)
	waitFor("b deleted once filtered", func() bool { return gone(seqB) })
	if gone(seqA) {
		t.Fatal("a was deleted before the ledger settled it")
	}
	ledger("a", messages.LedgerTrained)
	waitFor("a deleted once trained", func() bool { return gone(seqA) })
	if deleted, held := a.Released(); deleted != 2 || held != 0 {
		t.Fatalf("Released() = %d deleted, %d held; want 2, 0", deleted, held)
	}
}
