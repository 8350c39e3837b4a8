package model

import (
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

func TestNewDeterministicAndValidated(t *testing.T) {
	a, _ := New(DefaultConfig(), 1)
	b, _ := New(DefaultConfig(), 1)
	c, _ := New(DefaultConfig(), 2)
	if !slices.Equal(a.params, b.params) || slices.Equal(a.params, c.params) {
		t.Fatal("New is not a deterministic function of the seed")
	}
	if n := a.NumParams(); n < 40_000 || n > 2_000_000 {
		t.Fatalf("default model has %d parameters", n)
	}
	bad := DefaultConfig()
	bad.Window = 0
	if _, err := New(bad, 1); !errors.Is(err, ErrConfig) {
		t.Fatalf("window 0: %v", err)
	}
}

// TestNextLogitsMatchesForwardAndWindow: NextLogits only sees the last
// Window tokens, and equals the training-path Forward.
func TestNextLogitsMatchesForwardAndWindow(t *testing.T) {
	m, _ := New(DefaultConfig(), 3)
	W := m.Config().Window
	rng := rand.New(rand.NewPCG(1, 1))
	long := make([]int32, W+5)
	for i := range long {
		long[i] = int32(3 + rng.IntN(95))
	}
	a, b := make([]float32, m.VocabSize()), make([]float32, m.VocabSize())
	m.NextLogits(long, a)
	m.NextLogits(long[5:], b)
	if !slices.Equal(a, b) {
		t.Fatal("tokens older than the window changed the logits")
	}
	m.NextLogits(long[6:], b) // the oldest in-window token becomes PAD
	if slices.Equal(a, b) {
		t.Fatal("the window's oldest slot has no influence")
	}
	ws := m.NewWorkspace()
	if !slices.Equal(m.Forward(long, ws), a) {
		t.Fatal("Forward and NextLogits disagree")
	}
}

// TestNextLogitsConcurrent runs NextLogits from several goroutines on a
// frozen model (run with -race) and checks every result against a serial
// computation.
func TestNextLogitsConcurrent(t *testing.T) {
	m, _ := New(DefaultConfig(), 4)
	seqs := make([][]int32, 32)
	want := make([][]float32, len(seqs))
	rng := rand.New(rand.NewPCG(2, 2))
	for i := range seqs {
		for range 1 + rng.IntN(20) {
			seqs[i] = append(seqs[i], int32(rng.IntN(98)))
		}
		want[i] = make([]float32, m.VocabSize())
		m.NextLogits(seqs[i], want[i])
	}
	var wg sync.WaitGroup
	errs := make(chan int, 4*len(seqs))
	for g := range 4 {
		wg.Go(func() {
			out := make([]float32, m.VocabSize())
			for k := range seqs {
				i := (k + g*7) % len(seqs)
				m.NextLogits(seqs[i], out)
				if !slices.Equal(out, want[i]) {
					errs <- i
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for i := range errs {
		t.Fatalf("concurrent NextLogits differed for sequence %d", i)
	}
}

func TestNextLogitsNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	m, _ := New(DefaultConfig(), 4)
	toks := []int32{1, 5, 6, 7}
	out := make([]float32, m.VocabSize())
	m.NextLogits(toks, out)
	if a := testing.AllocsPerRun(100, func() { m.NextLogits(toks, out) }); a != 0 {
		t.Fatalf("%v allocations per NextLogits", a)
	}
}
