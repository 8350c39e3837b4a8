package agent

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/cluster/internal/clustertest"
	"github.com/asyncrl/asyncrl/cluster/placement"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/internal/syncbuf"
)

// execAgentConfig is agentRunConfig with the trainer in the PyTorch
// worker (ranks of it).
func execAgentConfig(t *testing.T, steps, ranks int) config.Config {
	t.Helper()
	argv, env := clustertest.TorchWorker(t)
	cfg := agentRunConfig(t, steps)
	cfg.Trainer.Backend = config.BackendExec
	cfg.Trainer.Exec, cfg.Trainer.ExecEnv = argv, append(env, "OMP_NUM_THREADS=1")
	cfg.Trainer.ExecRanks = ranks
	cfg.Trainer.ExecStepTimeout = 2 * time.Minute
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestAgentExecTrainerRunsToCompletion: one `asyncrl node --roles
// trainer,engine,rollout` with trainer.backend exec (the PyTorch worker)
// takes the trainer lease, trains every step through the child —
// checkpointing the child's state in the run's checkpoint store after
// each — and finishes the run with every prompt of every step trained
// once.
func TestAgentExecTrainerRunsToCompletion(t *testing.T) {
	const steps = 3
	cfg := execAgentConfig(t, steps, 1)
	var ev syncbuf.Buffer
	a := testAgent(t, externalBus(t), Config{Name: "n1", Roles: []string{placement.Trainer, placement.Engine, placement.Rollout},
		Run: cfg, Events: &ev})
	defer a.Stop()
	clustertest.WaitFor(t, 3*time.Minute, "the run to finish", func() bool {
		_, ok := a.FinalLedger()
		return ok
	})
	if got := lastStep(ev.String()); got != steps {
		t.Fatalf("last step %d, want %d:\n%s", got, steps, ev.String())
	}
	c, _ := a.FinalLedger()
	if b := cfg.Trainer.MiniBatchSize; c.InFlight != 0 || c.Refused != 0 || c.Trained != steps*b {
		t.Errorf("final ledger %+v; want %d trained (B=%d per step, none twice), none in flight, none refused", c, steps*b, b)
	}
}

// TestAgentExecGroupStandbyResumes: two trainer nodes with the trainer on
// a group of two torch ranks. The holder trains, checkpointing its
// group's sharded state after every step; when it stops, the standby
// takes the lease, starts its own group from the durable checkpoint (the
// shards and manifest downloaded and resumed by its ranks) and finishes
// the run from the holder's last durable step, each step's prompts
// trained once.
func TestAgentExecGroupStandbyResumes(t *testing.T) {
	const steps = 8
	url := externalBus(t)
	var ev1, ev2 syncbuf.Buffer
	mk := func(name string, ev *syncbuf.Buffer) *Agent {
		return testAgent(t, url, Config{Name: name, Roles: []string{placement.Trainer, placement.Engine},
			Run: execAgentConfig(t, steps, 2), Events: ev})
	}
	a1 := mk("n1", &ev1)
	defer a1.Stop()
	clustertest.WaitFor(t, 3*time.Minute, "n1 to train 2 steps", func() bool { return lastStep(ev1.String()) >= 2 })
	a1.Stop() // its group stops with its term
	stopped := lastStep(ev1.String())
	if stopped >= steps {
		t.Fatalf("n1 finished the run before it was stopped:\n%s", ev1.String())
	}
	a2 := mk("n2", &ev2)
	defer a2.Stop()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("n1:\n%s\nn2:\n%s", ev1.String(), ev2.String())
		}
	})
	clustertest.WaitFor(t, 3*time.Minute, "n2 to finish the run", func() bool {
		_, ok := a2.FinalLedger()
		return ok
	})
	out := ev2.String()
	resumed := regexp.MustCompile(`resume from step (\d+)`).FindStringSubmatch(out)
	if resumed == nil || !strings.Contains(out, "resume from checkpoint v") {
		t.Fatalf("n2 did not resume from a checkpoint:\n%s", out)
	}
	if from, _ := strconv.Atoi(resumed[1]); from != stopped || from == 0 {
		t.Errorf("n2 resumed from step %d; n1's last durable step was %d", from, stopped)
	}
	if got := lastStep(out); got != steps {
		t.Errorf("n2's last step %d; want %d\n%s\nn1:\n%s", got, steps, out, ev1.String())
	}
	c, _ := a2.FinalLedger()
	if b := config.Default().Trainer.MiniBatchSize; c.InFlight != 0 || c.Refused != 0 || c.Trained != steps*b {
		t.Errorf("final ledger %+v; want %d trained (B=%d per step, none twice), none in flight, none refused", c, steps*b, b)
	}
}
