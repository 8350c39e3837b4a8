package node

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/internal/report"
)

// TestExecTorchRanksRun: asyncrl run's loop with the trainer on a group
// of two gloo ranks of the PyTorch worker (trainer.exec_ranks 2, as
// examples/torch-ranks2.yaml) trains every step, each group at most once;
// summary.json lists both ranks with their step and all-reduce times and
// peak memory, and /metrics has their series.
func TestExecTorchRanksRun(t *testing.T) {
	argv, env := torchWorker(t)
	const steps = 3
	cfg := smallConfig(t, steps)
	cfg.Trainer.Backend = config.BackendExec
	cfg.Trainer.Exec, cfg.Trainer.ExecEnv = argv, append(env, "OMP_NUM_THREADS=1")
	cfg.Trainer.ExecRanks = 2
	cfg.Trainer.ExecStepTimeout = 2 * time.Minute
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	n, s := runNode(t, cfg, nil)
	checkRanAllSteps(t, s, steps)
	checkLedger(t, n, s)

	raw, err := os.ReadFile(filepath.Join(cfg.Run.ReportDir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var file report.Summary
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.TrainerRanks) != 2 {
		t.Fatalf("summary.json trainer_ranks %+v, want 2 ranks", file.TrainerRanks)
	}
	for r, row := range file.TrainerRanks {
		if row.Rank != r || row.Steps != steps || row.StepSecondsMean <= 0 || row.AllReduceSecondsMean <= 0 || row.MemoryBytes <= 0 {
			t.Errorf("trainer_ranks[%d] = %+v", r, row)
		}
	}

	mfs, err := n.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "asyncrl_trainer_rank_step_seconds_total", "asyncrl_trainer_rank_allreduce_seconds_total",
			"asyncrl_trainer_rank_steps_total", "asyncrl_trainer_rank_memory_bytes":
			seen[mf.GetName()] = len(mf.GetMetric())
		}
	}
	if len(seen) != 4 {
		t.Errorf("rank metrics %v, want the four asyncrl_trainer_rank_* families", seen)
	}
	for name, k := range seen {
		if k != 2 {
			t.Errorf("%s has %d series, want one per rank", name, k)
		}
	}
}
