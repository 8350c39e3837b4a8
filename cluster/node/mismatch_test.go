package node

import (
	"math"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/model/sampler"
	"github.com/asyncrl/asyncrl/model/tokenizer"
	"github.com/asyncrl/asyncrl/wiring"
)

// bf16Effect measures what serving the weights in BF16 does to the
// logprobs of this run's model: a reference trainer with the run's model
// and trainer config takes steps on its own samples, and at every version
// 0..steps the logprob of each sampled token under the FP32 master weights
// is compared with the same under the BF16-rounded serving copy (what an
// engine serves), on the same tokens. It returns the mean and the largest
// per-token |Δlogp|, and the mean |Δlogp| that sampling at temperature 0.7
// while the trainer assumes the configured one gives (a real
// engine–trainer discrepancy the check must resolve).
func bf16Effect(t *testing.T, cfg config.Config, steps int) (mean, maxTok, hotMean float64) {
	t.Helper()
	tcfg := wiring.PolicyTrainer(cfg)
	m, err := model.New(model.DefaultConfig(), uint64(cfg.Run.Seed))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := model.NewTrainer(m, tcfg)
	if err != nil {
		t.Fatal(err)
	}
	hotCfg := tcfg
	hotCfg.Temperature = 0.7
	rng := rand.New(rand.NewPCG(uint64(cfg.Run.Seed), 14))
	var s sampler.Scratch
	V := m.VocabSize()
	logits := make([]float32, V)
	var sum, hotSum float64
	var n int
	for v := 0; v <= steps; v++ {
		serve := tr.ServingCopy()
		var b model.Batch
		for range 16 {
			toks := []int32{tokenizer.BOS}
			for range 4 {
				toks = append(toks, int32(3+rng.IntN(V-3)))
			}
			mask := make([]uint8, len(toks))
			lps := make([]float32, len(toks))
			for range 8 {
				serve.NextLogits(toks, logits)
				tok, lp, _ := sampler.Sample(logits, sampler.Params{Temperature: tcfg.Temperature, TopP: 1}, rng, &s)
				toks, mask, lps = append(toks, tok), append(mask, 1), append(lps, lp)
			}
			b.Sequences = append(b.Sequences, model.Sequence{Tokens: toks, LossMask: mask, RolloutLogprobs: lps,
				Advantage: float32(rng.NormFloat64())})
		}
		fp32, err := tr.Logprobs(b)
		if err != nil {
			t.Fatal(err)
		}
		bfTr, _ := model.NewTrainer(serve, tcfg)
		bf16, _ := bfTr.Logprobs(b)
		hotTr, _ := model.NewTrainer(serve, hotCfg)
		hot, _ := hotTr.Logprobs(b)
		for si, sq := range b.Sequences {
			for i, mk := range sq.LossMask {
				if mk == 0 {
					continue
				}
				d := math.Abs(float64(fp32[si][i]) - float64(bf16[si][i]))
				sum += d
				maxTok = max(maxTok, d)
				hotSum += math.Abs(float64(fp32[si][i]) - float64(hot[si][i]))
				n++
			}
		}
		if _, err := tr.Step(b); err != nil {
			t.Fatal(err)
		}
	}
	return sum / float64(n), maxTok, hotSum / float64(n)
}

// checkSameVersionMismatch asserts the run's per-step mismatch over tokens
// of the version being trained is at the BF16 level: each step's mean at
// most 2× the largest per-token BF16 effect (a mean never exceeds its
// largest term; 2× for tokens the probe did not see), and the mean over all
// such tokens of the run at most 3× the mean BF16 effect. It returns the
// run's token-weighted mean and token count.
func checkSameVersionMismatch(t *testing.T, label string, n *Node, mean, maxTok float64) (float64, int) {
	t.Helper()
	var sum float64
	var tokens, withSame int
	for _, r := range n.steps() {
		st := r.Stats
		t.Logf("%s step %d: same-version mismatch %.3g over %d of %d tokens (all tokens %.3g)",
			label, r.Step, st.MismatchSameVersion, st.SameVersionTokens, st.Tokens, st.Mismatch)
		if st.SameVersionTokens == 0 {
			continue
		}
		if st.MismatchSameVersion > 2*maxTok {
			t.Errorf("%s step %d: same-version mismatch %.3g over %d tokens > 2 × the largest per-token BF16 effect %.3g",
				label, r.Step, st.MismatchSameVersion, st.SameVersionTokens, maxTok)
		}
		withSame++
		sum += st.MismatchSameVersion * float64(st.SameVersionTokens)
		tokens += st.SameVersionTokens
	}
	if tokens == 0 {
		t.Fatalf("%s: no step trained a token of its own version; the check saw nothing", label)
	}
	if steps := len(n.steps()); withSame < steps-1 {
		t.Errorf("%s: only %d of %d on-policy steps trained tokens of their own version", label, withSame, steps)
	}
	avg := sum / float64(tokens)
	if avg > 3*mean {
		t.Errorf("%s: same-version mismatch %.3g over %d tokens > 3 × the mean BF16 effect %.3g", label, avg, tokens, mean)
	}
	return avg, tokens
}

// TestSameVersionMismatchIsBF16Level: issue 14's cross-check. With the
// PyTorch worker training (trainer.backend exec) and the Go engine serving
// the weights it writes, the logprob mismatch at equal versions compares
// two implementations of one model and must be at the level of BF16
// rounding, measured on this model (bf16Effect), not guessed; the built-in
// trainer is checked the same way as the reference. The bound resolves a
// real discrepancy: a temperature mismatch is asserted to be ≥ 20× above
// it (model.TestMismatchSameVersion shows the metric catching one).
func TestSameVersionMismatchIsBF16Level(t *testing.T) {
	const steps = 5
	// On-policy (max_staleness_steps 0): every step trains tokens of the
	// version before it, so every step has same-version tokens (with
	// staleness 1 the rollouts of step v mostly come from v−2).
	base := smallConfig(t, steps)
	base.Trainer.MaxStalenessSteps, base.Trainer.NumParallelGenerationWorkers = 0, base.Trainer.MiniBatchSize
	mean, maxTok, hot := bf16Effect(t, base, steps)
	t.Logf("BF16 effect on logprobs: mean %.3g, largest per-token %.3g; temperature 0.7 vs %.1f: mean %.3g",
		mean, maxTok, base.Rollout.Temperature, hot)
	if !(mean > 0) || hot < 20*3*mean || hot < 20*maxTok {
		t.Fatalf("the bound (mean %.3g, per-token max %.3g) does not resolve a temperature discrepancy (%.3g)", mean, maxTok, hot)
	}

	nb, _ := runNode(t, base, nil)
	bAvg, bTok := checkSameVersionMismatch(t, "builtin", nb, mean, maxTok)

	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import torch, numpy, cbor2").Run(); err != nil {
		t.Skipf("built-in checked (same-version mismatch %.3g over %d tokens); %s with torch, numpy and cbor2 is needed for the PyTorch worker: %v", bAvg, bTok, py, err)
	}
	root, err := filepath.Abs(filepath.Join("..", "..", "integrations", "torch"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := smallConfig(t, steps)
	cfg.Trainer.MaxStalenessSteps, cfg.Trainer.NumParallelGenerationWorkers = 0, cfg.Trainer.MiniBatchSize
	cfg.Trainer.Backend = config.BackendExec
	cfg.Trainer.Exec = []string{py, "-m", "asyncrl_worker"}
	cfg.Trainer.ExecEnv = []string{"PYTHONPATH=" + root, "OMP_NUM_THREADS=1"}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	nt, _ := runNode(t, cfg, nil)
	tAvg, tTok := checkSameVersionMismatch(t, "torch", nt, mean, maxTok)
	t.Logf("same-version mismatch: builtin %.3g over %d tokens, torch %.3g over %d tokens; BF16 mean %.3g, per-token max %.3g",
		bAvg, bTok, tAvg, tTok, mean, maxTok)
}
