package model

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// sftBatch is n random sequences with a prompt (mask 0) and an answer
// (mask 1), no rollout logprobs: what the SFT runner sends.
func sftBatch(rng *rand.Rand, V, n int) Batch {
	b := Batch{Loss: LossCrossEntropy}
	for k := range n {
		L := 4 + rng.IntN(6)
		s := Sequence{Group: string(rune('a' + k%2))}
		for i := range L {
			s.Tokens = append(s.Tokens, int32(3+rng.IntN(V-3)))
			m := uint8(0)
			if i >= 2 {
				m = 1
			}
			s.LossMask = append(s.LossMask, m)
		}
		b.Sequences = append(b.Sequences, s)
	}
	return b
}

// refNLL is the reduced NLL computed independently: per token,
// −log softmax(NextLogits)[tok] in float64, reduced by the SkyRL formula.
func refNLL(m *Model, b Batch, reduction string) float64 {
	V := m.VocabSize()
	logits := make([]float32, V)
	var tokens int
	perSeq := make([]float64, len(b.Sequences))
	perSeqN := make([]int, len(b.Sequences))
	for si, s := range b.Sequences {
		for i := 1; i < len(s.Tokens); i++ {
			if s.LossMask[i] == 0 {
				continue
			}
			m.NextLogits(s.Tokens[:i], logits)
			mx := math.Inf(-1)
			for _, l := range logits {
				mx = max(mx, float64(l))
			}
			var z float64
			for _, l := range logits {
				z += math.Exp(float64(l) - mx)
			}
			perSeq[si] += -(float64(logits[s.Tokens[i]]) - mx - math.Log(z))
			perSeqN[si]++
			tokens++
		}
	}
	var out float64
	for si := range perSeq {
		switch reduction {
		case TokenMean:
			out += perSeq[si] / float64(tokens)
		case SequenceMean:
			out += perSeq[si] / float64(perSeqN[si]) / float64(len(perSeq))
		}
	}
	return out
}

// TestCrossEntropyLossAndGradient: the CE step's loss is the reduced NLL
// computed independently, and its gradient matches central finite
// differences of that NLL (so the step descends the supervised loss).
func TestCrossEntropyLossAndGradient(t *testing.T) {
	for _, red := range []string{TokenMean, SequenceMean} {
		t.Run(red, func(t *testing.T) {
			m, err := New(tinyConfig(), 5)
			if err != nil {
				t.Fatal(err)
			}
			for i := m.headW; i < m.headB; i++ {
				m.params[i] *= 20
			}
			m.refresh()
			cfg := DefaultTrainerConfig()
			cfg.Reduction = red
			cfg.EntropyCoef, cfg.KLCoef, cfg.Temperature = 0.5, 0.5, 0.7 // RL knobs CE must ignore
			tr, err := NewTrainer(m, cfg)
			if err != nil {
				t.Fatal(err)
			}
			b := sftBatch(rand.New(rand.NewPCG(1, 2)), m.VocabSize(), 4)
			st, g, err := tr.lossGrad(b)
			if err != nil {
				t.Fatal(err)
			}
			if want := refNLL(m, b, red); math.Abs(st.Loss-want) > 1e-9*max(1, want) {
				t.Fatalf("loss %.12g, reference NLL %.12g", st.Loss, want)
			}
			if nll, err := tr.NLL(b); err != nil || math.Abs(nll-st.Loss) > 1e-12 {
				t.Fatalf("NLL %v (%v), step loss %v", nll, err, st.Loss)
			}
			ana := slices.Clone(g)
			const eps = 1e-2
			checked := 0
			for i := range m.params {
				orig := m.params[i]
				m.params[i] = orig + eps
				m.refresh()
				up := refNLL(m, b, red)
				m.params[i] = orig - eps
				m.refresh()
				down := refNLL(m, b, red)
				m.params[i] = orig
				m.refresh()
				num := (up - down) / (2 * eps)
				if math.Abs(num-ana[i]) > 2e-4+3e-2*math.Abs(ana[i]) {
					t.Errorf("param %d (%s): analytic %.6g, numeric %.6g", i, m.paramName(i), ana[i], num)
				}
				if ana[i] != 0 {
					checked++
				}
			}
			if checked < m.NumParams()/3 {
				t.Fatalf("only %d of %d gradients non-zero: check is vacuous", checked, m.NumParams())
			}
		})
	}
}

// TestCrossEntropyLearnsAndSplitsLikeWhole: repeated CE steps on one batch
// drive its NLL down, and a microbatch split gives the same step as the
// whole batch.
func TestCrossEntropyLearnsAndSplitsLikeWhole(t *testing.T) {
	mk := func() *Trainer {
		m, err := New(tinyConfig(), 9)
		if err != nil {
			t.Fatal(err)
		}
		cfg := DefaultTrainerConfig()
		cfg.LR = 3e-2
		tr, err := NewTrainer(m, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	b := sftBatch(rand.New(rand.NewPCG(3, 4)), tinyConfig().VocabSize, 6)
	a, c := mk(), mk()
	first, err := a.NLL(b)
	if err != nil {
		t.Fatal(err)
	}
	for range 40 {
		if _, err := a.Step(b); err != nil {
			t.Fatal(err)
		}
		if _, err := c.StepMicrobatches(b, [][]int{{4, 0}, {}, {1, 2, 3, 5}}); err != nil {
			t.Fatal(err)
		}
	}
	last, _ := a.NLL(b)
	if !(last < 0.7*first) {
		t.Fatalf("NLL %.4f → %.4f: CE steps did not learn the batch", first, last)
	}
	for i := range a.model.params {
		if d := math.Abs(float64(a.model.params[i] - c.model.params[i])); d > 1e-4 {
			t.Fatalf("param %d: whole %v, split %v", i, a.model.params[i], c.model.params[i])
		}
	}
}

func TestCrossEntropyBatchValidation(t *testing.T) {
	m, _ := New(tinyConfig(), 1)
	tr, _ := NewTrainer(m, DefaultTrainerConfig())
	b := sftBatch(rand.New(rand.NewPCG(5, 6)), tinyConfig().VocabSize, 2)
	if _, err := tr.Totals(b); err != nil {
		t.Fatalf("CE batch without rollout logprobs refused: %v", err)
	}
	rl := b
	rl.Loss = ""
	if _, err := tr.Totals(rl); !errors.Is(err, ErrBatch) {
		t.Fatalf("RL batch without rollout logprobs: %v, want ErrBatch", err)
	}
	bad := b
	bad.Loss = "mse"
	if _, err := tr.Totals(bad); !errors.Is(err, ErrBatch) {
		t.Fatalf("unknown loss: %v", err)
	}
	tot, _ := tr.Totals(b)
	if err := tr.Begin(tot); err != nil {
		t.Fatal(err)
	}
	if err := tr.Accumulate(Batch{Sequences: b.Sequences, Loss: "other"}); !errors.Is(err, ErrBatch) {
		t.Fatalf("microbatch with another loss: %v", err)
	}
	tr.Discard()
}
