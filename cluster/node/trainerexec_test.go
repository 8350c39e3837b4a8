package node

import (
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/actors/trainer/bridge"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/internal/report"
)

// torchWorker is the trainer.exec command and environment of the PyTorch
// worker (integrations/torch), or a skip when Debian's python3 lacks torch,
// numpy or cbor2.
func torchWorker(t *testing.T) ([]string, []string) {
	t.Helper()
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import torch, numpy, cbor2").Run(); err != nil {
		t.Skipf("%s with torch, numpy and cbor2 is needed for the PyTorch worker: %v", py, err)
	}
	root, err := filepath.Abs(filepath.Join("..", "..", "integrations", "torch"))
	if err != nil {
		t.Fatal(err)
	}
	return []string{py, "-m", "asyncrl_worker"}, []string{"PYTHONPATH=" + root}
}

// TestExecTorchChildKilledMidStep: asyncrl run's loop with trainer.backend
// exec and the PyTorch worker as the child; the child is SIGKILLed right
// after the bridge has written step 2's TrainBatch to it (before it can
// answer). The supervisor starts a new child resumed from step 1's state
// and sends step 2 again; the run finishes all 5 steps, exactly one restart
// shows in asyncrl_trainer_exec_restarts_total, every version 1..5 is
// produced once, and the ledger says every group trained at most once and
// exactly steps·B groups trained.
func TestExecTorchChildKilledMidStep(t *testing.T) {
	argv, env := torchWorker(t)
	const steps = 5
	cfg := smallConfig(t, steps)
	cfg.Trainer.Backend = config.BackendExec
	cfg.Trainer.Exec, cfg.Trainer.ExecEnv = argv, env
	cfg.Trainer.ExecStepTimeout = 2 * time.Minute // against a hang, not a duration we expect
	cfg.Trainer.ExecRestarts = 2
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}

	type send struct{ pid, n int }
	var (
		mu     sync.Mutex
		sends  []send // TrainBatch writes in order: pid and ordinal
		killed int    // the pid killed
	)
	execOnSent = func(typ string, pid int) {
		if typ != bridge.TypeTrainBatch {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		sends = append(sends, send{pid, len(sends) + 1})
		if len(sends) == 2 { // step 2, in the child's hands
			killed = pid
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Errorf("kill %d: %v", pid, err)
			}
		}
	}
	t.Cleanup(func() { execOnSent = nil })

	n, s := runNode(t, cfg, nil)

	checkRanAllSteps(t, s, steps)
	// StepDone records: versions 1..steps, each once, in order.
	recs := n.steps()
	if len(recs) != steps {
		t.Fatalf("%d step records, want %d", len(recs), steps)
	}
	for i, r := range recs {
		if r.Step != int64(i+1) || r.Version != int64(i+1) {
			t.Errorf("record %d: step %d version %d, want %d", i, r.Step, r.Version, i+1)
		}
		if r.Stats.Tokens <= 0 || r.Stats.GradNorm <= 0 {
			t.Errorf("step %d trained nothing: %+v", r.Step, r.Stats)
		}
	}
	checkLedger(t, n, s)

	mu.Lock()
	defer mu.Unlock()
	if killed == 0 {
		t.Fatal("the child was never killed")
	}
	// steps+1 TrainBatch writes: step 2 a second time, to a new child.
	if len(sends) != steps+1 {
		t.Errorf("%d TrainBatch frames sent, want %d (one step resent): %v", len(sends), steps+1, sends)
	}
	for _, sd := range sends {
		if (sd.n <= 2) != (sd.pid == killed) {
			t.Errorf("TrainBatch %d went to pid %d (killed child %d): %v", sd.n, sd.pid, killed, sends)
		}
	}

	mfs, err := n.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	restarts := -1.0
	for _, mf := range mfs {
		if mf.GetName() == "asyncrl_trainer_exec_restarts_total" && len(mf.GetMetric()) == 1 {
			restarts = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if restarts != 1 {
		t.Errorf("asyncrl_trainer_exec_restarts_total %v, want 1", restarts)
	}
}

// checkRanAllSteps: the run trained steps steps, published them all, and
// every engine serves the last.
func checkRanAllSteps(t *testing.T, s report.Summary, steps int) {
	t.Helper()
	if s.Steps != steps || s.FinalVersion != int64(steps) {
		t.Fatalf("steps %d final version %d, want %d", s.Steps, s.FinalVersion, steps)
	}
	for i, v := range s.EngineVersions {
		if v != int64(steps) {
			t.Errorf("engine %d serves version %d, want %d", i, v, steps)
		}
	}
}
