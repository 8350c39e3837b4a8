package sft

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/asyncrl/asyncrl/actors/trainer/bridge"
	"github.com/asyncrl/asyncrl/sft/data"
)

// The test binary doubles as a trainer child (the built-in policy behind
// the worker-bridge frames) when ASYNCRL_TEST_SFT_CHILD is set, so the exec
// backend is tested through a real child process.
func TestMain(m *testing.M) {
	if os.Getenv("ASYNCRL_TEST_SFT_CHILD") != "" {
		var c bridge.BuiltinChild
		if err := c.Serve(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// fakeData is a stand-in for data.Open in the runner's unit tests: datasets
// of counting sequences (BOS, a, a+1, … mod a range: learnable by a window
// model) drawn in a seeded shuffle per dataset, mixed by weight, with a
// State that is the draw count (the stream is a pure function of it).
type fakeData struct {
	sizes   []int
	weights []float64
	seed    uint64
	epochs  int // 0 = endless; else total draws = epochs × Σ sizes
	opened  int // streams opened
}

type fakeStream struct {
	d      *fakeData
	n      int // examples drawn so far
	closed bool
}

func (d *fakeData) open(_ context.Context, cfg data.Config) (data.Stream, error) {
	if cfg.VocabSize == 0 || cfg.MaxLen == 0 {
		return nil, fmt.Errorf("the runner must fill vocab_size and max_len, got %d and %d", cfg.VocabSize, cfg.MaxLen)
	}
	d.opened++
	return &fakeStream{d: d}, nil
}

// example is draw number n.
func (d *fakeData) example(n int) data.Example {
	r := rand.New(rand.NewPCG(d.seed, uint64(n)))
	var sum float64
	for _, w := range d.weights {
		sum += w
	}
	x, ds := r.Float64()*sum, 0
	for ds < len(d.weights)-1 && x >= d.weights[ds] {
		x -= d.weights[ds]
		ds++
	}
	row := r.IntN(d.sizes[ds])
	rr := rand.New(rand.NewPCG(uint64(ds), uint64(row)))
	L := 6 + rr.IntN(10)
	start := 3 + rr.IntN(20)
	toks := []int32{1}
	for i := range L - 1 {
		toks = append(toks, int32(3+(start-3+i)%20))
	}
	var mask []uint8
	if ds == 1 { // a prompt part in the second dataset: only the tail is trained
		mask = make([]uint8, len(toks))
		for i := 3; i < len(mask); i++ {
			mask[i] = 1
		}
	}
	return data.Example{ID: data.ExampleID{Dataset: uint32(ds), Shard: uint32(row % 3), Row: uint32(row)}, Tokens: toks, LossMask: mask}
}

func (s *fakeStream) Next(ctx context.Context) (data.Example, error) {
	if err := ctx.Err(); err != nil {
		return data.Example{}, err
	}
	if s.d.epochs > 0 {
		total := 0
		for _, n := range s.d.sizes {
			total += n
		}
		if s.n >= s.d.epochs*total {
			return data.Example{}, io.EOF
		}
	}
	s.n++
	return s.d.example(s.n - 1), nil
}

func (s *fakeStream) State() ([]byte, error) { return json.Marshal(s.n) }
func (s *fakeStream) Restore(b []byte) error { return json.Unmarshal(b, &s.n) }
func (s *fakeStream) Close() error           { s.closed = true; return nil }

// greedyPack stands in for data.Pack: examples in order into bins of at
// most Budget tokens, padding bins up to a multiple of DP.
func greedyPack(examples []data.Example, cfg data.PackConfig) ([]data.Bin, error) {
	var bins []data.Bin
	var cur data.Bin
	for _, ex := range examples {
		if len(ex.Tokens) > cfg.Budget {
			return nil, fmt.Errorf("example of %d tokens over the budget %d", len(ex.Tokens), cfg.Budget)
		}
		if len(cur.Tokens)+len(ex.Tokens) > cfg.Budget {
			bins = append(bins, cur)
			cur = data.Bin{}
		}
		cur.Tokens = append(cur.Tokens, ex.Tokens...)
		cur.IDs = append(cur.IDs, ex.ID)
	}
	if len(cur.IDs) > 0 {
		bins = append(bins, cur)
	}
	for len(bins)%cfg.DP != 0 {
		bins = append(bins, data.Bin{})
	}
	return bins, nil
}
