package data

import (
	"context"
	"os"
	"testing"
)

// BenchmarkDataPath: shuffled sample → read → FFD pack over a generated
// 2^22-token, 16-shard Arrow dataset (uint16 ids, lengths 16–200). The
// scale run (2^30 tokens, RSS) is `make bench-sft-data`.
// Sub-benchmarks: sampler shuffle (pread per row) and block_shuffle (reads
// through the mapping, pages dropped per window), serial and pipelined.
func BenchmarkDataPath(b *testing.B) {
	for _, kind := range []string{"shuffle", "block_shuffle"} {
		for _, pipelined := range []bool{false, true} {
			b.Run(kind+"/"+map[bool]string{false: "serial", true: "pipelined"}[pipelined], func(b *testing.B) { benchDataPath(b, kind, pipelined) })
		}
	}
}

func benchDataPath(b *testing.B, kind string, pipelined bool) {
	dir := b.TempDir()
	if err := Generate(context.Background(), GenerateOptions{Dir: dir, Tokens: 1 << 22, Shards: 16, VocabSize: 32000, MinLen: 16, MaxLen: 200, Seed: 1}); err != nil {
		b.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Datasets = []DatasetConfig{{Name: "b", Path: dir}}
	cfg.Sampler.Seed = 1
	cfg.Sampler.Kind = kind
	s, err := Open(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.ResetTimer()
	var tokens int64
	for i := 0; i < b.N; i++ {
		r, err := Throughput(context.Background(), s, ThroughputOptions{Tokens: 1 << 20, Batch: 1024, Pipelined: pipelined, Pack: PackConfig{Budget: 8192, DP: 8}})
		if err != nil {
			b.Fatal(err)
		}
		tokens += r.Tokens
	}
	b.ReportMetric(float64(tokens)/b.Elapsed().Seconds()/1e6, "Mtokens/s")
	_ = os.Getpid
}
