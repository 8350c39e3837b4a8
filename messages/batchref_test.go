package messages

import (
	"errors"
	"testing"
)

// TestBatchRefResolve: a reference resolves to exactly the bytes it names
// (inline, or inside the stored GroupReady) and refuses anything else — a
// wrong size, a wrong checksum, another group at that sequence, no bytes.
func TestBatchRefResolve(t *testing.T) {
	arrow := []byte("arrow-ipc-bytes")
	sum := BatchChecksum(arrow)
	stored, err := Encode(GroupReady{Header: Header{RunID: "r"}, GroupID: "g1", Batch: BatchRef{Inline: arrow, Bytes: int64(len(arrow)), Checksum: sum}})
	if err != nil {
		t.Fatal(err)
	}
	ref := BatchRef{Subject: "asyncrl.r.trajectories", Seq: 9, Bytes: int64(len(arrow)), Checksum: sum}
	if got, err := ref.Resolve("g1", stored); err != nil || string(got) != string(arrow) {
		t.Fatalf("stored ref: %q, %v; want the stored group's batch", got, err)
	}
	if got, err := (BatchRef{Inline: arrow, Checksum: sum}).Resolve("g1", nil); err != nil || string(got) != string(arrow) {
		t.Fatalf("inline ref: %q, %v", got, err)
	}
	bad := []struct {
		name   string
		ref    BatchRef
		group  string
		stored []byte
	}{
		{"another group at that sequence", ref, "g2", stored},
		{"wrong checksum", BatchRef{Subject: ref.Subject, Seq: 9, Checksum: BatchChecksum([]byte("other"))}, "g1", stored},
		{"wrong size", BatchRef{Subject: ref.Subject, Seq: 9, Bytes: 3}, "g1", stored},
		{"not a message", ref, "g1", []byte{0xff, 0x00}},
		{"no bytes", BatchRef{}, "g1", nil},
	}
	for _, tc := range bad {
		if _, err := tc.ref.Resolve(tc.group, tc.stored); !errors.Is(err, ErrBadBatch) {
			t.Errorf("%s: err %v, want ErrBadBatch", tc.name, err)
		}
	}
}

// InlineRef carries the bytes with their size and checksum: it resolves
// to them, and other bytes of the same size fail its check.
func TestInlineRef(t *testing.T) {
	data := []byte("an encoded token batch")
	r := InlineRef(data)
	if r.Stored() || r.Bytes != int64(len(data)) || r.Checksum != BatchChecksum(data) {
		t.Fatalf("InlineRef = %+v; want inline, %d bytes, checksum %s", r, len(data), BatchChecksum(data))
	}
	if got, err := r.Resolve("g", nil); err != nil || string(got) != string(data) {
		t.Fatalf("Resolve = %q, %v; want the bytes", got, err)
	}
	other := []byte("an encoded token batcH")
	if err := r.Check(other); err == nil {
		t.Fatal("Check accepted other bytes of the same size")
	}
}
