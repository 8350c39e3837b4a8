package trainer

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/asyncrl/asyncrl/actors/trainer/microbatch"
	"github.com/asyncrl/asyncrl/messages"
	pmodel "github.com/asyncrl/asyncrl/model"
)

// shapedBatch packs n trajectories shaped like the default run's (gridwalk:
// a prompt, then turns of 2 model tokens and an observation), lengths in
// [minLen, maxLen], in groups of groupSize with random rewards.
func shapedBatch(t testing.TB, n, groupSize, minLen, maxLen int, seed uint64) *messages.TokenBatch {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	tb, err := messages.NewTokenBatch(messages.BatchSpec{Vocab: 98})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		L := minLen + rng.IntN(maxLen-minLen+1)
		tr := messages.Trajectory{ID: fmt.Sprint(i), GroupID: fmt.Sprint("g", i/groupSize), Reward: float32(rng.IntN(2)), PromptLen: 24}
		for j := range L {
			tr.TokenIDs = append(tr.TokenIDs, int32(3+rng.IntN(95)))
			model := j >= 24 && (j-24)%14 < 2
			if model {
				tr.LossMask = append(tr.LossMask, 1)
				tr.Logprobs = append(tr.Logprobs, float32(-4.6+0.5*rng.NormFloat64()))
			} else {
				tr.LossMask = append(tr.LossMask, 0)
				tr.Logprobs = append(tr.Logprobs, 0)
			}
			tr.PolicyVersions = append(tr.PolicyVersions, 0)
		}
		if err := tb.Append(tr); err != nil {
			t.Fatal(err)
		}
	}
	return tb
}

func newTrainer(t testing.TB, workers int) *pmodel.Trainer {
	t.Helper()
	m, err := pmodel.New(pmodel.DefaultConfig(), 1)
	if err != nil {
		t.Fatal(err)
	}
	cfg := pmodel.DefaultTrainerConfig()
	cfg.Workers = workers
	tr, err := pmodel.NewTrainer(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// TestTrainFollowsPlanOneStep: with microbatching and two DP ranks, Train
// takes one optimiser step whose result matches a single pass over the
// mini-batch (float tolerance), and the plan really had several
// microbatches and padding.
func TestTrainFollowsPlanOneStep(t *testing.T) {
	tb := shapedBatch(t, 11, 4, 30, 120, 7)
	whole := newTrainer(t, 2)
	split := newTrainer(t, 2)
	mb := microbatch.DefaultConfig()
	mb.MaxTokensPerMicrobatch, mb.DPSize = 150, 2
	for step := range 2 {
		pw, err := Prepare(tb, true, microbatch.DefaultConfig(), whole.Version())
		if err != nil {
			t.Fatal(err)
		}
		ps, err := Prepare(tb, true, mb, split.Version())
		if err != nil {
			t.Fatal(err)
		}
		if n := len(ps.Plan.Ranks[0].Microbatches); n < 3 {
			t.Fatalf("plan has %d microbatches per rank; the test wants several", n)
		}
		a, err := Train(whole, pw)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Train(split, ps)
		if err != nil {
			t.Fatal(err)
		}
		if a.Version != int64(step+1) || b.Version != a.Version || a.Tokens != b.Tokens ||
			math.Abs(a.GradNorm-b.GradNorm) > 1e-9*a.GradNorm || math.Abs(a.Loss-b.Loss) > 1e-9 {
			t.Fatalf("step %d: whole %+v, microbatched %+v", step, a, b)
		}
	}
	var d float64
	logW, logS := make([]float32, 98), make([]float32, 98)
	seq := []int32{1, 40, 41, 42}
	whole.Model().NextLogits(seq, logW)
	split.Model().NextLogits(seq, logS)
	for i := range logW {
		d = max(d, math.Abs(float64(logW[i]-logS[i])))
	}
	if d > 1e-4 {
		t.Fatalf("after two steps the models' logits differ by %v", d)
	}
}

// recBackend records the order of Train's calls.
type recBackend struct {
	calls []string
	fail  int // Accumulate call (1-based) that fails; 0 = none
}

func (r *recBackend) Totals(b pmodel.Batch) (pmodel.BatchTotals, error) {
	r.calls = append(r.calls, fmt.Sprint("totals ", len(b.Sequences)))
	return pmodel.BatchTotals{Sequences: len(b.Sequences), Tokens: 1, MaxLen: 1}, nil
}
func (r *recBackend) Begin(pmodel.BatchTotals) error { r.calls = append(r.calls, "begin"); return nil }
func (r *recBackend) Accumulate(mb pmodel.Batch) error {
	var ids []int32
	for _, s := range mb.Sequences {
		ids = append(ids, s.Tokens[0])
	}
	r.calls = append(r.calls, fmt.Sprint("acc ", ids))
	if r.fail > 0 && r.count("acc") == r.fail {
		return errors.New("boom")
	}
	return nil
}
func (r *recBackend) Apply() (pmodel.StepStats, error) {
	r.calls = append(r.calls, "apply")
	return pmodel.StepStats{Version: 1}, nil
}
func (r *recBackend) Discard() { r.calls = append(r.calls, "discard") }
func (r *recBackend) count(prefix string) int {
	n := 0
	for _, c := range r.calls {
		if len(c) >= len(prefix) && c[:len(prefix)] == prefix {
			n++
		}
	}
	return n
}

// TestTrainOrderAndPadding: ranks in rank order, microbatches in plan
// order, padding as one PAD token, one Apply; a failing microbatch
// discards the step.
func TestTrainOrderAndPadding(t *testing.T) {
	seq := func(id int32) pmodel.Sequence { return pmodel.Sequence{Tokens: []int32{id}} }
	p := Prepared{Batch: pmodel.Batch{Sequences: []pmodel.Sequence{seq(10), seq(11), seq(12), seq(13)}},
		Plan: microbatch.Plan{Ranks: []microbatch.Rank{
			{Microbatches: []microbatch.Microbatch{{Indices: []int{3}}, {Indices: []int{0, 2}}}},
			{Microbatches: []microbatch.Microbatch{{Indices: []int{1}}, {Padding: true, Tokens: 1}}},
		}}}
	r := &recBackend{}
	if _, err := Train(r, p); err != nil {
		t.Fatal(err)
	}
	want := []string{"totals 4", "begin", "acc [13]", "acc [10 12]", "acc [11]", "acc [0]", "apply"}
	if !slices.Equal(r.calls, want) {
		t.Fatalf("calls %q, want %q", r.calls, want)
	}
	r = &recBackend{fail: 2}
	if _, err := Train(r, p); err == nil || r.calls[len(r.calls)-1] != "discard" || r.count("apply") != 0 {
		t.Fatalf("failing microbatch: err %v, calls %q", err, r.calls)
	}
	p.Plan.Ranks[1].Microbatches[0].Indices = []int{9}
	r = &recBackend{}
	if _, err := Train(r, p); err == nil || r.calls[len(r.calls)-1] != "discard" || r.count("apply") != 0 {
		t.Fatalf("bad index: err %v, calls %q", err, r.calls)
	}
}

// BenchmarkTrainDefaultShape times one trainer step on the default run's
// mini-batch shape (B=4 groups × n=8, gridwalk-like sequences of 60–200
// tokens, 2 workers as on the 2-core reference machine) with microbatching
// off and on.
func BenchmarkTrainDefaultShape(b *testing.B) {
	tb := shapedBatch(b, 32, 8, 60, 200, 3)
	for _, cap := range []int{-1, 1024, 256} {
		for _, dp := range []int{1, 2} {
			if cap == -1 && dp == 2 {
				continue
			}
			b.Run(fmt.Sprintf("max_tokens_per_microbatch=%d/dp=%d", cap, dp), func(b *testing.B) {
				tr := newTrainer(b, 2)
				mb := microbatch.DefaultConfig()
				mb.MaxTokensPerMicrobatch, mb.DPSize = cap, dp
				p, err := Prepare(tb, true, mb, 0)
				if err != nil {
					b.Fatal(err)
				}
				n := 0
				for _, r := range p.Plan.Ranks {
					n += len(r.Microbatches)
				}
				for b.Loop() {
					if _, err := Train(tr, p); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(n), "microbatches")
			})
		}
	}
}
