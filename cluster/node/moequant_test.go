package node

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/asyncrl/asyncrl/config"
)

// moeQuantConfig is examples/moe.yaml (a mixture of experts with R3) with
// engines.quantize and trainer.fake_quant set to q and fq, a few on-policy
// steps (every step then trains tokens of its own version).
func moeQuantConfig(t *testing.T, q config.ServingQuantization, fq config.FakeQuantization) config.Config {
	t.Helper()
	c, err := config.Load(filepath.Join("..", "..", "examples", "moe.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	c.Run.Steps = 2
	c.Run.DataDir = t.TempDir()
	c.Run.ReportDir = filepath.Join(t.TempDir(), "report")
	c.Rollout.NSamplesPerPrompt, c.Rollout.Concurrency = 4, 8
	c.Trainer.MiniBatchSize, c.Trainer.NumParallelGenerationWorkers, c.Trainer.MaxStalenessSteps = 2, 2, 0
	c.Engines.Quantize, c.Trainer.FakeQuant = q, fq
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return c
}

// sameVersionMismatch runs cfg and returns the token-weighted mean
// mismatch over tokens of the version being trained, after checking the
// run lost nothing and every step trained such tokens.
func sameVersionMismatch(t *testing.T, label string, cfg config.Config) float64 {
	t.Helper()
	n, s := runNode(t, cfg, nil)
	if s.TrajectoriesLost != 0 {
		t.Fatalf("%s: %d trajectories lost", label, s.TrajectoriesLost)
	}
	var sum float64
	var tokens int
	for _, r := range n.steps() {
		st := r.Stats
		if st.SameVersionTokens == 0 {
			t.Fatalf("%s step %d: no token of its own version (on-policy run)", label, r.Step)
		}
		sum += st.MismatchSameVersion * float64(st.SameVersionTokens)
		tokens += st.SameVersionTokens
	}
	if len(n.steps()) != cfg.Run.Steps {
		t.Fatalf("%s: %d steps recorded, want %d", label, len(n.steps()), cfg.Run.Steps)
	}
	avg := sum / float64(tokens)
	t.Logf("%s: same-version mismatch %.3g over %d tokens", label, avg, tokens)
	return avg
}

// TestMoEQuantizedRunFakeQuant: examples/moe.yaml with engines serving
// int4_g32 and trainer.fake_quant int4_g32 runs through the whole loop
// with the built-in trainer and with the PyTorch worker, and each trainer's
// logprobs of its own version's tokens (experts replayed, R3) are the
// quantised engine's up to float32 rounding; without fake_quant the same
// run is orders of magnitude further off, so the bound resolves it.
func TestMoEQuantizedRunFakeQuant(t *testing.T) {
	// float32 rounding: 1.2e-7 measured for both trainers; BF16 serving
	// alone is ~4e-4 (docs/engine.md); this mixture trained without
	// fake_quant against INT4 engines 5e-3.
	const bound = 1e-5
	if m := sameVersionMismatch(t, "builtin", moeQuantConfig(t, config.ServeINT4G32, config.FakeQuantINT4G32)); m > bound {
		t.Errorf("builtin trainer with fake_quant: same-version mismatch %.3g > %g", m, bound)
	}
	if m := sameVersionMismatch(t, "builtin dense", moeQuantConfig(t, config.ServeINT4G32, config.FakeQuantNone)); m < 100*bound {
		t.Errorf("builtin trainer without fake_quant: same-version mismatch %.3g, not above %g: the bound would not catch a trainer that ignores fake_quant", m, 100*bound)
	}

	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import torch, numpy, cbor2").Run(); err != nil {
		t.Skipf("%s with torch, numpy and cbor2 is needed for the PyTorch worker: %v", py, err)
	}
	root, err := filepath.Abs(filepath.Join("..", "..", "integrations", "torch"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := moeQuantConfig(t, config.ServeINT4G32, config.FakeQuantINT4G32)
	cfg.Trainer.Backend = config.BackendExec
	cfg.Trainer.Exec = []string{py, "-m", "asyncrl_worker"}
	cfg.Trainer.ExecEnv = []string{"PYTHONPATH=" + root, "OMP_NUM_THREADS=1"}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if m := sameVersionMismatch(t, "torch", cfg); m > bound {
		t.Errorf("torch trainer with fake_quant: same-version mismatch %.3g > %g", m, bound)
	}
}
