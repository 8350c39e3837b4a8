package messages

import (
	"bytes"
	"errors"
	"testing"
)

// isTyped reports whether err wraps one of the package's sentinel errors.
func isTyped(err error) bool {
	for _, s := range []error{ErrTruncated, ErrBadMagic, ErrUnknownVersion, ErrUnknownType, ErrTooLarge, ErrMalformed} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

func FuzzDecodeEnvelope(f *testing.F) {
	for _, m := range samples() {
		b, err := Encode(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Add([]byte{})
	f.Add([]byte("AR"))
	f.Fuzz(func(t *testing.T, b []byte) {
		k, perr := DefaultCodec().PeekKind(b)
		m, err := Decode(b)
		if err != nil {
			if !isTyped(err) {
				t.Fatalf("untyped error: %v", err)
			}
			if perr != nil && !errors.Is(err, errors.Unwrap(perr)) {
				t.Fatalf("PeekKind error %v but Decode error %v", perr, err)
			}
			return
		}
		if perr != nil || k != m.Kind() {
			t.Fatalf("PeekKind = %s, %v for a frame that decodes as %s", k, perr, m.Kind())
		}
		_ = m.String()
		// Re-encode → decode must be stable: the canonical form is a fixed point.
		b1, err := Encode(m)
		if err != nil {
			t.Fatalf("re-encode of decoded %s: %v", m.Kind(), err)
		}
		m2, err := Decode(b1)
		if err != nil {
			t.Fatalf("decode of re-encoded %s: %v", m.Kind(), err)
		}
		b2, err := Encode(m2)
		if err != nil || !bytes.Equal(b1, b2) {
			t.Fatalf("re-encode not stable for %s (err %v):\n%x\n%x", m.Kind(), err, b1, b2)
		}
		if m.String() != m2.String() {
			t.Fatalf("String differs after round trip:\n%s\n%s", m, m2)
		}
	})
}

func FuzzDecodeTokenBatch(f *testing.F) {
	specs := []BatchSpec{
		{},
		{Vocab: 100, TokenRewards: true},
		{RouteLayers: 2, RouteTopK: 2, NumExperts: 8},
		{RouteLayers: 1, RouteTopK: 2, NumExperts: 300},
		{RouteLayers: 1, RouteTopK: 1, NumExperts: 1 << 16, SupportK: 2, Vocab: 50},
	}
	for i, s := range specs {
		b, err := EncodeTokenBatch(makeBatch(f, s, 3, 5, uint64(i)))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	empty, err := NewTokenBatch(specs[len(specs)-1])
	if err != nil {
		f.Fatal(err)
	}
	eb, err := EncodeTokenBatch(empty)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(eb)
	f.Add(foreignStream(f, -1)) // pyarrow-style: nullable fields, other column order
	f.Fuzz(func(t *testing.T, b []byte) {
		tb, err := DecodeTokenBatchLimit(b, 1<<20)
		if err != nil {
			if !isTyped(err) {
				t.Fatalf("untyped error: %v", err)
			}
			return
		}
		if err := tb.Validate(); err != nil {
			t.Fatalf("decoded batch fails Validate: %v", err)
		}
		for i := 0; i < tb.Len(); i++ {
			if _, err := tb.Trajectory(i); err != nil {
				t.Fatalf("Trajectory(%d) of a valid batch: %v", i, err)
			}
		}
		b1, err := EncodeTokenBatch(tb)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		tb2, err := DecodeTokenBatch(b1)
		if err != nil {
			t.Fatalf("decode of re-encoded batch: %v", err)
		}
		if tb2.Spec() != tb.Spec() || tb2.Len() != tb.Len() || tb2.NumTokens() != tb.NumTokens() {
			t.Fatalf("round trip changed the shape: %+v → %+v", tb.Spec(), tb2.Spec())
		}
		b2, err := EncodeTokenBatch(tb2)
		if err != nil || !bytes.Equal(b1, b2) {
			t.Fatalf("re-encode not stable (err %v)", err)
		}
	})
}
