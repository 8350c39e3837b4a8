package sampling

import (
	"testing"

	"github.com/asyncrl/asyncrl/messages"
)

// TestHeldReleasesOnlySettledGroups: a group's stored message is released
// exactly once, by the ledger entry that settles it (trained, filtered,
// requeued); consumed and unknown groups release nothing.
func TestHeldReleasesOnlySettledGroups(t *testing.T) {
	for _, state := range []messages.LedgerState{messages.LedgerTrained, messages.LedgerFiltered, messages.LedgerRequeued} {
		h := NewHeld()
		h.Keep("g1", 7)
		h.Keep("g2", 9)
		if _, ok := h.Settle(messages.PromptLedger{GroupID: "g1", State: messages.LedgerConsumed}); ok {
			t.Fatalf("%s: a consumed entry released g1", state)
		}
		seq, ok := h.Settle(messages.PromptLedger{GroupID: "g1", State: state})
		if !ok || seq != 7 {
			t.Fatalf("%s: Settle(g1) = %d, %v; want 7, true", state, seq, ok)
		}
		if _, ok := h.Settle(messages.PromptLedger{GroupID: "g1", State: state}); ok {
			t.Fatalf("%s: g1 released twice", state)
		}
		if _, ok := h.Settle(messages.PromptLedger{GroupID: "other", State: state}); ok {
			t.Fatalf("%s: a group never kept was released", state)
		}
		if h.Len() != 1 {
			t.Fatalf("%s: %d held, want 1 (g2)", state, h.Len())
		}
	}
}

// TestReference: an inline group becomes a reference with the rollout's
// size and checksum (computed when it packed none) and no bytes; a group
// already a reference, or with no batch, is left as it is.
func TestReference(t *testing.T) {
	data := []byte("arrow ipc bytes")
	g := messages.GroupReady{GroupID: "g", Batch: messages.BatchRef{Inline: data}}
	r, ok := Reference(g, "asyncrl.r.trajectories", 12)
	want := messages.BatchRef{Subject: "asyncrl.r.trajectories", Seq: 12, Bytes: int64(len(data)), Checksum: messages.BatchChecksum(data)}
	if !ok || r.Batch.Subject != want.Subject || r.Batch.Seq != want.Seq || r.Batch.Bytes != want.Bytes ||
		r.Batch.Checksum != want.Checksum || len(r.Batch.Inline) != 0 {
		t.Fatalf("Reference = %+v, %v; want %+v", r.Batch, ok, want)
	}
	g.Batch.Bytes, g.Batch.Checksum = 99, "xxh3-128:packed"
	if r, _ := Reference(g, "s", 1); r.Batch.Bytes != 99 || r.Batch.Checksum != "xxh3-128:packed" {
		t.Fatalf("the rollout's size and checksum were not kept: %+v", r.Batch)
	}
	if _, ok := Reference(r, "s", 2); ok {
		t.Fatal("a reference was referenced again")
	}
	if _, ok := Reference(messages.GroupReady{GroupID: "e"}, "s", 3); ok {
		t.Fatal("a group without a batch became a reference")
	}
}
