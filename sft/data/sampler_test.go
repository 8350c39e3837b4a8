package data

import (
	"context"
	"errors"
	"io"
	"math"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// Perm visits every value of [0, n) exactly once, for small and odd n.
func TestPermIsAPermutation(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.Uint64Range(1, 5000).Draw(t, "n")
		p := NewPerm(n, rapid.Uint64().Draw(t, "seed"))
		seen := make([]bool, n)
		for i := uint64(0); i < n; i++ {
			v := p.At(i)
			if v >= n || seen[v] {
				t.Fatalf("At(%d) = %d: out of range or repeated (n %d)", i, v, n)
			}
			seen[v] = true
		}
	})
}

// A shuffle epoch is a permutation of all rows of all datasets; each
// epoch's order is another; epochs set ends the stream.
func TestShuffleEpochs(t *testing.T) {
	sizes := []int64{300, 200}
	s := NewShuffle(sizes, 7, 2)
	var epochs [2][]int64
	for e := range epochs {
		for range 500 {
			p, err := s.Next()
			if err != nil {
				t.Fatal(err)
			}
			g := p.Index
			if p.Dataset == 1 {
				g += 300
			}
			epochs[e] = append(epochs[e], g)
		}
		sorted := slices.Sorted(slices.Values(epochs[e]))
		for i, g := range sorted {
			if g != int64(i) {
				t.Fatalf("epoch %d is not a permutation of the 500 rows (sorted[%d] = %d)", e, i, g)
			}
		}
	}
	if slices.Equal(epochs[0], epochs[1]) {
		t.Fatal("both epochs in the same order")
	}
	if _, err := s.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after 2 epochs: %v, want io.EOF", err)
	}
}

// The built-in samplers resume exactly: stop at k, save, build a fresh
// sampler, restore, and the next picks equal an uninterrupted run's.
func TestSamplerExactResume(t *testing.T) {
	sizes := []int64{37, 11, 5}
	cfgs := map[string]SamplerConfig{
		"sequential":  {Kind: "sequential"},
		"shuffle":     {Kind: "shuffle", Seed: 3},
		"block":       {Kind: "block_shuffle", Seed: 3, BlockRows: 4, Window: 3},
		"block-fin":   {Kind: "block_shuffle", Seed: 3, BlockRows: 5, Window: 2, Epochs: 2},
		"block-wide":  {Kind: "block_shuffle", Seed: 3, BlockRows: 1000, Window: 16},
		"mixture":     {Kind: "mixture", Seed: 3, Temperature: 1},
		"mixture-rep": {Kind: "mixture", Seed: 3, Replacement: true, Temperature: 0.5},
		"mixture-fin": {Kind: "mixture", Seed: 3, Epochs: 2, Temperature: 2},
	}
	for name, cfg := range cfgs {
		t.Run(name, func(t *testing.T) {
			for _, k := range []int{0, 1, 52, 53, 100} {
				ref, _ := NewSampler(cfg, sizes, nil)
				run := func(s Sampler, n int) []Pick {
					var out []Pick
					for range n {
						p, err := s.Next()
						if errors.Is(err, io.EOF) {
							break
						}
						if err != nil {
							t.Fatal(err)
						}
						out = append(out, p)
					}
					return out
				}
				want := run(ref, k+120)
				a, _ := NewSampler(cfg, sizes, nil)
				run(a, k)
				st, err := a.State()
				if err != nil {
					t.Fatal(err)
				}
				b, _ := NewSampler(cfg, sizes, nil)
				if err := b.Restore(st); err != nil {
					t.Fatal(err)
				}
				if got := run(b, 120); !slices.Equal(got, want[min(k, len(want)):]) {
					t.Fatalf("k=%d: resumed picks differ from the uninterrupted run", k)
				}
			}
		})
	}
}

// Weights 0.5/0.3/0.2 over 10^6 draws land within 1% (relative) of the
// configured proportions, with and without replacement.
func TestMixtureProportions(t *testing.T) {
	sizes := []int64{1000, 5000, 300}
	w := []float64{0.5, 0.3, 0.2}
	for _, repl := range []bool{true, false} {
		m := NewMixture(sizes, w, 42, 0, repl)
		var n [3]float64
		const draws = 1_000_000
		for range draws {
			p, err := m.Next()
			if err != nil {
				t.Fatal(err)
			}
			if p.Index < 0 || p.Index >= sizes[p.Dataset] {
				t.Fatalf("pick %+v outside the dataset", p)
			}
			n[p.Dataset]++
		}
		for d := range w {
			got := n[d] / draws
			if math.Abs(got-w[d])/w[d] > 0.01 {
				t.Errorf("replacement %v: dataset %d drew %.4f, want %.2f ± 1%%", repl, d, got, w[d])
			}
		}
	}
}

// Without replacement and with epochs, each dataset gives each of its
// rows once per epoch, then leaves; the stream ends when all have left.
func TestMixtureWithoutReplacementCoversRows(t *testing.T) {
	sizes := []int64{50, 7}
	m := NewMixture(sizes, []float64{0.1, 0.9}, 1, 2, false)
	counts := [2]map[int64]int{{}, {}}
	total := 0
	for {
		p, err := m.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		counts[p.Dataset][p.Index]++
		total++
	}
	if total != 2*57 {
		t.Fatalf("%d draws, want %d (2 epochs of 57 rows)", total, 2*57)
	}
	for d, c := range counts {
		for i := int64(0); i < sizes[d]; i++ {
			if c[i] != 2 {
				t.Fatalf("dataset %d row %d drawn %d times, want 2", d, i, c[i])
			}
		}
	}
}

func TestMixtureWeightsTemperature(t *testing.T) {
	w, err := MixtureWeights([]int64{100, 400}, nil, 1)
	if err != nil || math.Abs(w[0]-0.2) > 1e-12 {
		t.Fatalf("T=1: %v %v, want [0.2 0.8]", w, err)
	}
	w, _ = MixtureWeights([]int64{100, 400}, nil, 2) // sqrt: 10 vs 20
	if math.Abs(w[0]-1.0/3) > 1e-12 {
		t.Fatalf("T=2: %v, want [1/3 2/3]", w)
	}
	if _, err := MixtureWeights([]int64{1, 2}, []float64{1, 0}, 1); err == nil {
		t.Fatal("one weight of two set: want an error")
	}
}

// Stream state: stop after k examples, reopen the datasets, restore, and
// the next examples' ids equal the uninterrupted stream's; a state over
// other datasets is refused.
func TestStreamExactResume(t *testing.T) {
	a := genDir(t, GenerateOptions{Tokens: 20000, Shards: 4, VocabSize: 1000, MinLen: 10, MaxLen: 90, Seed: 1})
	b := genDir(t, GenerateOptions{Tokens: 8000, Shards: 2, VocabSize: 1000, MinLen: 10, MaxLen: 90, Seed: 2, Format: FormatParquet})
	cfg := DefaultConfig()
	cfg.Datasets = []DatasetConfig{{Name: "a", Path: a, Weight: 0.7}, {Name: "b", Path: b, Weight: 0.3}}
	cfg.Sampler = SamplerConfig{Kind: "mixture", Seed: 9}
	cfg.VocabSize = 1000
	ctx := context.Background()
	open := func(c Config) Stream {
		s, err := Open(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	const k, m = 333, 400
	want := ids(drain(t, open(cfg), k+m))[k:]
	first := open(cfg)
	drain(t, first, k)
	st, err := first.State()
	if err != nil {
		t.Fatal(err)
	}
	first.Close()
	second := open(cfg)
	if err := second.Restore(st); err != nil {
		t.Fatal(err)
	}
	if got := ids(drain(t, second, m)); !slices.Equal(got, want) {
		t.Fatal("resumed stream's example ids differ from the uninterrupted stream's")
	}
	other := cfg
	other.Datasets = cfg.Datasets[:1]
	other.Datasets[0].Weight = 1
	if err := open(other).Restore(st); !errors.Is(err, ErrBadState) {
		t.Fatalf("restore over other datasets: %v, want ErrBadState", err)
	}
}

// A custom sampler plugs in through OpenWith.
type everyOther struct{ n, i int64 }

func (e *everyOther) Next() (Pick, error) {
	if e.i >= e.n {
		return Pick{}, io.EOF
	}
	p := Pick{Index: e.i}
	e.i += 2
	return p, nil
}
func (e *everyOther) State() ([]byte, error) { return []byte{byte(e.i)}, nil }
func (e *everyOther) Restore(b []byte) error { e.i = int64(b[0]); return nil }

func TestCustomSampler(t *testing.T) {
	dir := t.TempDir()
	writeRows(t, dir+"/x.arrow", ShardOptions{Format: FormatArrow}, [][]int32{{0}, {1}, {2}, {3}, {4}}, nil)
	cfg := DefaultConfig()
	cfg.Datasets = []DatasetConfig{{Name: "x", Path: dir}}
	s, err := OpenWith(context.Background(), cfg, func(sizes []int64, _ []float64) (Sampler, error) {
		return &everyOther{n: sizes[0]}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	drain(t, s, 1)
	st, _ := s.State()
	var got []int32
	for _, ex := range drain(t, s, -1) {
		got = append(got, ex.Tokens[0])
	}
	if !slices.Equal(got, []int32{2, 4}) {
		t.Fatalf("custom sampler yielded %v, want [2 4]", got)
	}
	if err := s.Restore(st); err != nil {
		t.Fatal(err)
	}
	if ex := drain(t, s, 1); ex[0].Tokens[0] != 2 {
		t.Fatalf("after restore: %v, want 2", ex[0].Tokens)
	}
}
