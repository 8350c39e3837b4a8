package agent

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/cluster/internal/clustertest"
	"github.com/asyncrl/asyncrl/cluster/term"
)

// TestClusterTorchGroupKillHolder (make test-cluster): three asyncrl node
// processes, the trainer on a group of two gloo ranks of the PyTorch
// worker on n1 and on n2 (trainer.exec_ranks 2). SIGKILL the holder mid
// run: the standby takes the lease, starts its own group from the durable
// checkpoint (the holder's sharded child state in the checkpoint store)
// and finishes the run; every step's prompts trained exactly once.
func TestClusterTorchGroupKillHolder(t *testing.T) {
	e2eEnabled(t)
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import numpy, cbor2, torch.distributed as d; assert d.is_gloo_available()").Run(); err != nil {
		t.Skipf("%s with torch (gloo), numpy and cbor2 is needed for the PyTorch worker group: %v", py, err)
	}
	_, file, _, _ := runtime.Caller(0)
	pkg, err := filepath.Abs(filepath.Join(filepath.Dir(file), "..", "..", "integrations", "torch"))
	if err != nil {
		t.Fatal(err)
	}
	const steps = 10
	c := newE2ECluster(t, steps)
	c.yaml = fmt.Sprintf("trainer:\n  backend: exec\n  exec: [%q, -m, asyncrl_worker]\n  exec_env: [\"PYTHONPATH=%s\", OMP_NUM_THREADS=1]\n  exec_ranks: 2\n  exec_step_timeout: 2m\n", py, pkg)
	trainers := []*proc{c.start(0, "trainer,engine,controller,publisher"), c.start(1, "trainer,engine,controller,publisher")}
	c.start(2, "engine,rollout")
	holder, standby, hname, sname := pickHolder(t, trainers, 3)
	if err := holder.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-holder.exited
	printed := lastDurable(holder.records(t))
	t.Logf("%s killed after step %d", hname, printed)
	clustertest.WaitFor(t, 5*time.Minute, "the standby to finish the run", func() bool {
		return lastDurable(standby.records(t)) >= steps && countKind(standby.records(t), term.RunComplete) > 0
	})
	recs := standby.records(t)
	resumed := ofKind(recs, term.Resumed)
	if len(resumed) == 0 {
		t.Fatalf("%s never resumed:\n%s", sname, standby.out.String())
	}
	if from := int(resumed[0].Step); from != printed && from != printed+1 {
		t.Errorf("%s resumed from step %d; the holder's last durable step was %d", sname, from, printed)
	}
	clustertest.WaitFor(t, 30*time.Second, "the standby's ledger line", func() bool { return clustertest.LedgerLine.MatchString(standby.out.String()) })
	checkLedgerLine(t, standby.out.String(), steps)
}
