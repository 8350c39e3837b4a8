package sft

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/model"
)

const torchPython = "/usr/bin/python3"

// TestTorchBackend: SFT on the PyTorch worker (integrations/torch) through
// the exec backend: it learns, it resumes from its own state with the same
// examples, and its losses track the built-in child's on the same steps
// to float rounding (both start from the same BF16 serving weights). Skips where /usr/bin/python3
// cannot import torch, cbor2 and numpy, like the bridge's cross-check.
func TestTorchBackend(t *testing.T) {
	// find_spec, not import: importing torch takes seconds, the children pay it
	probe := `import importlib.util as u, sys; sys.exit(0 if all(u.find_spec(m) for m in ("torch", "cbor2", "numpy")) else 1)`
	if out, err := exec.Command(torchPython, "-c", probe).CombinedOutput(); err != nil {
		t.Skipf("%s cannot import torch, cbor2 and numpy (the torch worker's dependencies): %v: %s", torchPython, err, out)
	}
	pkg, err := filepath.Abs(filepath.Join("..", "integrations", "torch"))
	if err != nil {
		t.Fatal(err)
	}
	base := testConfig(t)
	base.Steps, base.CheckpointEvery = 4, 0
	base.TokensPerStep = 128 // a few examples a step: the test's time is the interpreter's start
	base.Backend, base.ExecStepTimeout, base.ExecRestarts = BackendExec, time.Minute, 1

	gocfg := base
	gocfg.Exec, gocfg.ExecEnv = []string{os.Args[0]}, []string{"ASYNCRL_TEST_SFT_CHILD=1"}
	goRun, _ := runIDs(t, gocfg, newFake(), context.Background())

	cfg := base
	cfg.OutputDir = t.TempDir()
	cfg.Exec = []string{torchPython, "-m", "asyncrl_worker"}
	cfg.ExecEnv = []string{"PYTHONPATH=" + pkg, "OMP_NUM_THREADS=1", "ASYNCRL_WORKER_LOG=WARNING"}
	cfg.Steps = 2
	first, _ := runIDs(t, cfg, newFake(), context.Background())
	cfg.Steps, cfg.Resume = 4, true
	rest, res := runIDs(t, cfg, newFake(), context.Background())
	// measured (256-token steps): |Δloss| 3e-10 at step 1 (same weights),
	// ≤ 1.3e-8 over steps 2–6, across the resume too
	sameSteps(t, "torch vs go child", append(first, rest...), goRun, 1e-6)
	if !(res.Report.LastLoss < res.Report.FirstLoss) {
		t.Fatalf("torch loss %.4f → %.4f", res.Report.FirstLoss, res.Report.LastLoss)
	}
	if _, err := model.LoadServing(filepath.Join(cfg.OutputDir, LatestName, ServingDir)); err != nil {
		t.Fatal(err)
	}
}
