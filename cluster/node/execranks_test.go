package node

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
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

// TestExecRanksBadStart: bad input for a worker group is a clear error at
// start and nothing is trained — a world size that does not divide the
// global batch (refused by New, before any process starts), a group over
// several nodes in one process (exec_nodes without a cluster), and a rank
// that never joins the rendezvous (Start fails naming the address, the
// timeout and the rank that never answered; no step, no state written).
func TestExecRanksBadStart(t *testing.T) {
	argv, env := torchWorker(t)
	exec := func(cfg *config.Config) {
		cfg.Trainer.Backend = config.BackendExec
		cfg.Trainer.Exec, cfg.Trainer.ExecEnv = argv, append(env, "OMP_NUM_THREADS=1")
		cfg.Trainer.ExecStepTimeout = 2 * time.Minute
	}

	t.Run("world size does not divide the batch", func(t *testing.T) {
		cfg := smallConfig(t, 1) // B·n = 2·4 = 8 sequences
		exec(&cfg)
		cfg.Trainer.ExecRanks = 3
		n, err := New(cfg, Options{InMemoryBus: true})
		if err == nil {
			n.Stop()
			t.Fatal("a group of 3 ranks for 8 sequences was accepted")
		}
		if !errors.Is(err, ErrConfig) && !strings.Contains(err.Error(), "trainer.exec_ranks") {
			t.Errorf("err %v; want a config error naming trainer.exec_ranks", err)
		}
		if !strings.Contains(err.Error(), "3 ranks do not divide the global batch") || !strings.Contains(err.Error(), "= 8 sequences") {
			t.Errorf("err %q does not say which batch 3 ranks cannot divide", err)
		}
		if _, serr := os.Stat(execDir(cfg)); !os.IsNotExist(serr) {
			t.Errorf("the trainer's directory %s exists after a refused config (%v)", execDir(cfg), serr)
		}
	})

	t.Run("a group over nodes in one process", func(t *testing.T) {
		cfg := smallConfig(t, 1)
		exec(&cfg)
		cfg.Trainer.ExecNodes = 2
		n, err := New(cfg, Options{InMemoryBus: true})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err = n.Start(ctx)
		n.Stop()
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "trainer.exec_nodes 2") || !strings.Contains(err.Error(), "asyncrl node") {
			t.Fatalf("err %v; want a config error saying exec_nodes needs asyncrl node", err)
		}
		if st := n.steps(); len(st) != 0 {
			t.Errorf("%d steps trained", len(st))
		}
	})

	t.Run("a rank never joins the rendezvous", func(t *testing.T) {
		cfg := smallConfig(t, 2)
		exec(&cfg)
		cfg.Trainer.ExecRanks = 2
		cfg.Trainer.ExecRendezvousTimeout = 3 * time.Second
		// rank 1 sleeps instead of starting the worker (it reads RANK, as torchrun's ranks do)
		cfg.Trainer.Exec = append([]string{"/bin/sh", "-c", `if [ "$RANK" = 1 ]; then exec sleep 120; fi; exec "$@"`, "sh"}, argv...)
		n, err := New(cfg, Options{InMemoryBus: true})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		err = n.Start(ctx)
		n.Stop()
		if err == nil {
			t.Fatal("a node whose trainer group's rank 1 never joined started")
		}
		for _, want := range []string{"rendezvous at tcp://127.0.0.1:", "within 3s", "rank 1 of 2 had not answered its Init"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
		if st := n.steps(); len(st) != 0 {
			t.Errorf("%d steps trained", len(st))
		}
		ents, _ := os.ReadDir(filepath.Join(execDir(cfg), "out"))
		for _, e := range ents {
			t.Errorf("written although nothing trained: %s", e.Name())
		}
	})
}
