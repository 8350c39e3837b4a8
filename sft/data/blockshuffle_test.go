package data

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// Each block_shuffle epoch is a permutation of all rows; each window's
// draws come from at most Window blocks, and every block is drawn whole
// inside one window; epochs differ; epochs set ends the stream.
func TestBlockShuffleEpochsAndWindows(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		sizes := rapid.SliceOfN(rapid.Int64Range(1, 300), 1, 3).Draw(t, "sizes")
		blockRows := rapid.IntRange(1, 64).Draw(t, "blockRows")
		window := rapid.IntRange(1, 8).Draw(t, "window")
		s := NewBlockShuffle(sizes, rapid.Uint64().Draw(t, "seed"), 2, blockRows, window)
		total := sum(sizes)
		starts := []int64{0}
		for _, n := range sizes {
			starts = append(starts, starts[len(starts)-1]+n)
		}
		var orders [2][]int64
		for e := range orders {
			perWindow := map[int64]map[int64]int64{} // window → block → rows drawn
			blockWindow := map[int64]int64{}
			for range total {
				p, err := s.Next()
				if err != nil {
					t.Fatal(err)
				}
				g := starts[p.Dataset] + p.Index
				orders[e] = append(orders[e], g)
				w, b := s.Window(), g/int64(blockRows)
				if perWindow[w] == nil {
					perWindow[w] = map[int64]int64{}
				}
				perWindow[w][b]++
				if prev, ok := blockWindow[b]; ok && prev != w {
					t.Fatalf("epoch %d: block %d drawn in windows %d and %d", e, b, prev, w)
				}
				blockWindow[b] = w
			}
			for w, blocks := range perWindow {
				if len(blocks) > window {
					t.Fatalf("epoch %d window %d drew from %d blocks, want ≤ %d", e, w, len(blocks), window)
				}
			}
			sorted := slices.Sorted(slices.Values(orders[e]))
			for i, g := range sorted {
				if g != int64(i) {
					t.Fatalf("epoch %d is not a permutation of the %d rows (sorted[%d] = %d)", e, total, i, g)
				}
			}
		}
		if total > 20 && slices.Equal(orders[0], orders[1]) {
			t.Fatal("both epochs in the same order")
		}
		if _, err := s.Next(); !errors.Is(err, io.EOF) {
			t.Fatalf("after 2 epochs: %v, want io.EOF", err)
		}
	})
}

// The block_shuffle stream reads rows through the mapping (dropping the
// pages once per window): every example equals the row the pread path
// reads for the same id, masks included, and it resumes exactly.
func TestBlockShuffleStreamReadsSameRows(t *testing.T) {
	dir := genDir(t, GenerateOptions{Tokens: 60000, Shards: 3, VocabSize: 1000, MinLen: 5, MaxLen: 60, Seed: 4, Mask: true})
	big := genDir(t, GenerateOptions{Tokens: 30000, Shards: 2, VocabSize: 70000, MinLen: 5, MaxLen: 60, Seed: 5})
	ctx := context.Background()
	open := func(kind string) *DataStream {
		cfg := DefaultConfig()
		cfg.Datasets = []DatasetConfig{{Name: "a", Path: dir}, {Name: "b", Path: big}}
		cfg.Sampler = SamplerConfig{Kind: kind, Seed: 2, Epochs: 1, BlockRows: 64, Window: 4}
		s, err := OpenWith(ctx, cfg, func(sizes []int64, w []float64) (Sampler, error) { return NewSampler(cfg.Sampler, sizes, w) })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	ref := map[ExampleID]Example{}
	for _, ex := range drain(t, open("sequential"), -1) {
		ref[ex.ID] = ex
	}
	bs := open("block_shuffle")
	got := drain(t, bs, -1)
	if len(got) != len(ref) {
		t.Fatalf("block_shuffle epoch: %d examples, want %d", len(got), len(ref))
	}
	masked := 0
	for _, ex := range got {
		want, ok := ref[ex.ID]
		if !ok {
			t.Fatalf("%v: not a row of the datasets, or drawn twice", ex.ID)
		}
		delete(ref, ex.ID)
		if !slices.Equal(ex.Tokens, want.Tokens) || !slices.Equal(ex.LossMask, want.LossMask) {
			t.Fatalf("%v: read through the mapping differs from the pread path", ex.ID)
		}
		if ex.LossMask != nil {
			masked++
		}
	}
	if masked == 0 {
		t.Fatal("no example carried its loss mask")
	}
	if bs.Drops == 0 {
		t.Fatal("the stream never dropped a window's pages")
	}
	const k, m = 700, 500
	want := ids(drain(t, open("block_shuffle"), k+m))[k:]
	first := open("block_shuffle")
	drain(t, first, k)
	st, err := first.State()
	if err != nil {
		t.Fatal(err)
	}
	second := open("block_shuffle")
	if err := second.Restore(st); err != nil {
		t.Fatal(err)
	}
	if got := ids(drain(t, second, m)); !slices.Equal(got, want) {
		t.Fatal("resumed block_shuffle stream's example ids differ from the uninterrupted stream's")
	}
}
