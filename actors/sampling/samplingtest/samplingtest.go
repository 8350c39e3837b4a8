// Package samplingtest is a test helper: it stores a group in a
// trajectory buffer as the rollout actor does and hands back the
// reference the sampling actor forwards, for the tests of what reads
// groups by reference (the trainer's fetch).
package samplingtest

import (
	"context"
	"testing"

	"github.com/asyncrl/asyncrl/actors/sampling"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
)

// StoreGroup stores tb as group's GroupReady on subject of st — its
// batch inline, with size and checksum, as the rollout actor stores it —
// and returns the reference the sampling actor makes of it
// (sampling.Reference: subject, sequence, size and checksum, no bytes).
func StoreGroup(t testing.TB, st transport.Stream, subject, group string, tb *messages.TokenBatch) messages.BatchRef {
	t.Helper()
	data, err := messages.EncodeTokenBatch(tb)
	if err != nil {
		t.Fatal(err)
	}
	g := messages.GroupReady{Header: messages.Header{RunID: "r"}, GroupID: group, Batch: messages.InlineRef(data)}
	env, err := messages.Encode(g)
	if err != nil {
		t.Fatal(err)
	}
	seq, err := st.Publish(context.Background(), subject, env)
	if err != nil {
		t.Fatal(err)
	}
	ref, ok := sampling.Reference(g, subject, seq)
	if !ok {
		t.Fatalf("group %s: no reference made of its stored batch", group)
	}
	return ref.Batch
}
