package data

import (
	"context"
	"testing"
)

// The pipelined data path (pack on a second goroutine) packs exactly what
// the serial one does.
func TestThroughputPipelinedMatchesSerial(t *testing.T) {
	dir := genDir(t, GenerateOptions{Tokens: 50000, Shards: 3, VocabSize: 300, MinLen: 5, MaxLen: 100, Seed: 4})
	run := func(pipelined bool) ThroughputResult {
		cfg := DefaultConfig()
		cfg.Datasets = []DatasetConfig{{Name: "t", Path: dir}}
		cfg.Sampler.Epochs = 1
		s, err := Open(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		r, err := Throughput(context.Background(), s, ThroughputOptions{Batch: 100, Pipelined: pipelined, Pack: PackConfig{Budget: 256, DP: 4}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a, b := run(false), run(true)
	if a.Tokens != 50000 || a.Examples != b.Examples || a.Tokens != b.Tokens || a.Bins != b.Bins || a.PaddingTokens != b.PaddingTokens || a.Bins%4 != 0 {
		t.Fatalf("serial %+v, pipelined %+v: want one epoch of 50000 tokens, the same bins", a, b)
	}
}
