package data

import (
	"context"
	"errors"
	"io"
	"testing"
)

// writeRows writes rows (and masks, if non-nil) as one shard.
func writeRows(t *testing.T, path string, opt ShardOptions, rows [][]int32, masks [][]uint8) {
	t.Helper()
	opt.Mask = masks != nil
	w, err := CreateShard(path, opt)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rows {
		var m []uint8
		if masks != nil {
			m = masks[i]
		}
		if err := w.Append(r, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// drain reads up to n examples (n < 0: until EOF).
func drain(t *testing.T, s Stream, n int) []Example {
	t.Helper()
	var out []Example
	for n < 0 || len(out) < n {
		ex, err := s.Next(context.Background())
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ex)
	}
	return out
}

func ids(exs []Example) []ExampleID {
	out := make([]ExampleID, len(exs))
	for i, e := range exs {
		out[i] = e.ID
	}
	return out
}

func genDir(t *testing.T, o GenerateOptions) string {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	if err := Generate(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	return o.Dir
}
