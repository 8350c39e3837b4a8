package safetensors

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"
	"testing/iotest"
)

func TestStreamReader(t *testing.T) {
	ts := sampleTensors()
	b, _ := Marshal(ts, map[string]string{"v": "1"})
	// One byte at a time: the reader must not depend on Read filling p.
	sr, err := NewStreamReader(iotest.OneByteReader(bytes.NewReader(b)))
	if err != nil {
		t.Fatal(err)
	}
	if sr.Metadata["v"] != "1" {
		t.Fatalf("metadata %v", sr.Metadata)
	}
	for i, want := range ts {
		if i == 3 { // skip one tensor without reading it
			info, _, err := sr.Next()
			if err != nil || info.Name != want.Name {
				t.Fatalf("skip %s: %v %v", want.Name, info.Name, err)
			}
			continue
		}
		info, got, err := sr.ReadNext()
		if err != nil || info.Name != want.Name || !bytes.Equal(got, want.Data) || !slices.Equal(info.Shape, want.Shape) {
			t.Fatalf("tensor %d: %+v %v %v", i, info, got, err)
		}
	}
	if _, _, err := sr.Next(); err != io.EOF {
		t.Fatalf("after the last tensor: %v, want io.EOF", err)
	}
}

func TestStreamReaderTruncated(t *testing.T) {
	b, _ := Marshal(sampleTensors(), nil)
	// Cut inside the first tensor's data.
	sr, err := NewStreamReader(bytes.NewReader(b[:len(b)-40]))
	if err != nil {
		t.Fatal(err)
	}
	var last error
	for {
		_, _, err := sr.ReadNext()
		if err != nil {
			last = err
			break
		}
	}
	if !errors.Is(last, ErrFormat) {
		t.Fatalf("truncated stream: %v, want ErrFormat", last)
	}
	if _, err := NewStreamReader(bytes.NewReader(b[:20])); !errors.Is(err, ErrFormat) {
		t.Fatalf("truncated header: %v", err)
	}
}
