package agent

import (
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/cluster/internal/clustertest"
	"github.com/asyncrl/asyncrl/cluster/term"
)

// Cluster chaos with the trainer on a PyTorch worker group (issue 32, in
// make test-cluster): three asyncrl node processes — n1 and n2 trainer
// nodes whose trainer is a group of two gloo ranks of the PyTorch worker
// (trainer.exec_ranks 2), n3 engine+rollout — lose, mid run, one of:
//
//   - holder: the node holding the trainer lease (SIGKILL). Its ranks die
//     with it (no orphans: checked by pid), the standby takes the lease
//     and starts its own group from the durable sharded checkpoint.
//   - rank:   one rank process of the holder's group (SIGKILL, rank 0 or
//     1 by turns). The step fails for the whole group, the holder kills
//     the other rank, starts a new group from its last completed state
//     and trains the step again — keeping its lease.
//   - n3:     the engine+rollout node (SIGKILL). The holder keeps its
//     lease and its group.
//
// The kill lands after a step drawn from ASYNCRL_CLUSTER_SEED (3…6 of 12;
// logged, so a run replays) plus a drawn 0–1.5 s, so it hits the group in
// different phases: mid-TrainBatch, in the sharded state write, in the
// checkpoint upload, idle between steps — with steps left to train (a
// rank killed after the last step would have no group to restart).
// Each run must end with the ledger check: steps × B prompts trained
// (none twice, none lost), none in flight, none refused, every step
// durable. ASYNCRL_CLUSTER_REPS runs each (default 3); every run logs a
// TORCHCHAOS line (victim, result, duration, load average) for
// bench/results/torch-chaos.md.

const torchChaosSteps = 12

// torchGroupYAML is the trainer section of a two-rank PyTorch worker
// group, or a skip where Debian's python3 lacks torch with gloo.
func torchGroupYAML(t *testing.T) string {
	t.Helper()
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import numpy, cbor2, torch.distributed as d; assert d.is_gloo_available()").Run(); err != nil {
		t.Skipf("%s with torch (gloo), numpy and cbor2 is needed for the PyTorch worker group: %v", py, err)
	}
	_, file, _, _ := runtime.Caller(0)
	pkg, err := filepath.Abs(filepath.Join(filepath.Dir(file), "..", "..", "integrations", "torch"))
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("trainer:\n  backend: exec\n  exec: [%q, -m, asyncrl_worker]\n  exec_env: [\"PYTHONPATH=%s\", OMP_NUM_THREADS=1, OPENBLAS_NUM_THREADS=1]\n  exec_ranks: 2\n  exec_step_timeout: 2m\n", py, pkg)
}

func TestClusterTorchGroupChaos(t *testing.T) {
	e2eEnabled(t)
	torchChaosMatrix(t, torchGroupYAML(t), torchChaosSteps, func(rng *rand.Rand) int { return 3 + rng.Intn(4) }, "TORCHCHAOS")
}

// torchChaosMatrix runs reps(t) runs of steps on the cluster config yaml
// for each victim (holder, rank, n3), the kill after the step afterStep
// draws, and logs one tag line per run and a summary per victim.
func torchChaosMatrix(t *testing.T, yaml string, steps int, afterStep func(*rand.Rand) int, tag string) {
	bin := clustertest.BuildBinary(t)
	rng := rand.New(rand.NewSource(clusterSeed(t)))
	type tally struct{ pass, fail int }
	tallies := map[string]*tally{}
	victims := []string{"holder", "rank", "n3"}
	for _, victim := range victims {
		tallies[victim] = &tally{}
		for r := range reps(t) {
			m := torchKill{victim: victim, rep: r, steps: steps, afterStep: afterStep(rng), jitter: time.Duration(rng.Intn(1500)) * time.Millisecond}
			ran := false // a subtest -run filters out passes without running
			ok := t.Run(fmt.Sprintf("kill-%s-%d", victim, r+1), func(t *testing.T) {
				ran = true
				start, load0 := time.Now(), loadAvg()
				defer func() {
					res := "pass"
					if t.Failed() {
						res = "FAIL"
					}
					t.Logf("%s victim=%s run=%d after_step=%d+%s result=%s took=%s load=%s→%s", tag, victim, r+1,
						m.afterStep, m.jitter, res, time.Since(start).Round(time.Second), load0, loadAvg())
				}()
				c := newE2EClusterBin(t, bin, steps, 3, 3)
				c.yaml = yaml
				torchChaosRun(t, c, m)
			})
			tl := tallies[victim]
			switch {
			case !ran:
			case ok:
				tl.pass++
			default:
				tl.fail++
			}
		}
	}
	for _, v := range victims {
		if tallies[v].pass+tallies[v].fail == 0 {
			continue
		}
		t.Logf("SUMMARY %s, kill %s: %d passed, %d failed", tag, v, tallies[v].pass, tallies[v].fail)
	}
}

// torchKill is one run's fault: whom to kill, when.
type torchKill struct {
	victim    string
	rep       int // picks the rank: rep mod 2
	steps     int // the run's
	afterStep int
	jitter    time.Duration
}

// torchChaosRun starts the three nodes on c, waits until a holder made
// m.afterStep durable, kills m.victim m.jitter later, and checks the run
// finishes clean.
func torchChaosRun(t *testing.T, c *e2eCluster, m torchKill) {
	victim := m.victim
	nodes := []*proc{c.start(0, "trainer,engine,controller,publisher"), c.start(1, "trainer,engine,controller,publisher"),
		c.start(2, "engine,rollout")}
	holderP, standbyP, hname, sname := pickHolder(t, nodes[:2], 3)
	clustertest.WaitFor(t, 3*time.Minute, fmt.Sprintf("%s to make step %d durable", hname, m.afterStep), func() bool {
		return lastDurable(holderP.records(t)) >= m.afterStep
	})
	ranks := waitRanks(t, holderP, hname)
	// The fault's moment within the step (drawn), not a wait for a condition.
	time.Sleep(m.jitter)
	hrecs0, srecs0 := holderP.records(t), standbyP.records(t)
	before := lastDurable(hrecs0)
	var survivors []*proc // the nodes one of which must finish the run
	switch victim {
	case "holder":
		if err := holderP.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-holderP.Exited
		// The ranks die with their node (Pdeathsig; the worker's own watch).
		clustertest.WaitFor(t, 10*time.Second, fmt.Sprintf("%s's ranks %v to die with it", hname, ranks), func() bool {
			return !slices.ContainsFunc(ranks, alive)
		})
		survivors = []*proc{standbyP}
	case "rank":
		if before >= m.steps-1 {
			t.Fatalf("the run reached step %d of %d before the rank kill: no step left to prove the group's restart (draw an earlier moment)", before, m.steps)
		}
		pid := ranks[m.rep%len(ranks)]
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill rank pid %d: %v", pid, err)
		}
		// The group restarts: both ranks are new processes.
		clustertest.WaitFor(t, 3*time.Minute, hname+"'s group to restart", func() bool {
			now := rankPIDs(holderP.Cmd.Process.Pid)
			return len(now) == len(ranks) && !slices.ContainsFunc(now, func(p int) bool { return slices.Contains(ranks, p) })
		})
		survivors = []*proc{holderP, standbyP}
	case "n3":
		if err := nodes[2].Cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-nodes[2].Exited
		survivors = []*proc{holderP, standbyP}
	default:
		t.Fatalf("unknown victim %q", victim)
	}
	t.Logf("killed the %s (holder %s, ranks %v) %s after step %d was durable (step %d when killed)", victim, hname, ranks, m.jitter, m.afterStep, before)
	var fin *proc
	clustertest.WaitFor(t, 6*time.Minute, "a node to finish the run", func() bool {
		for _, p := range survivors {
			if countKind(p.records(t), term.RunComplete) > 0 && clustertest.LedgerLine.MatchString(p.Out.String()) {
				fin = p
				return true
			}
		}
		return false
	})
	checkLedgerLine(t, fin.Out.String(), m.steps)
	if got := lastDurable(fin.records(t)); got != m.steps {
		t.Errorf("the finishing node's last durable step %d; want %d", got, m.steps)
	}
	switch victim {
	case "holder":
		resumed := ofKind(fin.records(t), term.Resumed)
		if len(resumed) == 0 {
			t.Fatalf("%s never resumed:\n%s", sname, fin.Out.String())
		}
	default:
		// A rank's or n3's death is not the holder's: from the kill on it
		// keeps its term — no lease lost or taken (a lease that changed
		// hands before the kill, at start on a loaded machine, is not this
		// fault's doing).
		hrecs := holderP.records(t)[len(hrecs0):]
		srecs := standbyP.records(t)[len(srecs0):]
		if fin != holderP || countKind(hrecs, term.LeaseLost) > 0 || countKind(hrecs, term.LeaseAcquired)+countKind(srecs, term.LeaseAcquired) > 0 {
			t.Errorf("%s lost its term when the %s died:\n%s", hname, victim, lossLines(hrecs))
		}
	}
}

// waitRanks waits until p's node runs its group's two ranks and returns
// their pids.
func waitRanks(t *testing.T, p *proc, name string) []int {
	t.Helper()
	var pids []int
	clustertest.WaitFor(t, time.Minute, name+"'s two rank processes", func() bool {
		pids = rankPIDs(p.Cmd.Process.Pid)
		return len(pids) == 2
	})
	return pids
}

// rankPIDs are the live child processes of pid (a trainer node's rank
// processes: its only children), sorted.
func rankPIDs(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, state, ok := procStat(child)
		if ok && ppid == pid && state != 'Z' {
			out = append(out, child)
		}
	}
	slices.Sort(out)
	return out
}

// procStat reads a process's parent pid and state from /proc.
func procStat(pid int) (ppid int, state byte, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, false
	}
	// pid (comm) state ppid …: comm may hold spaces and parentheses
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	return ppid, f[0][0], err == nil
}

// alive: pid runs (a zombie nobody reaped yet does not: a container's init
// may not reap orphans).
func alive(pid int) bool {
	_, state, ok := procStat(pid)
	return ok && state != 'Z'
}

// loadAvg is the 1-minute load average ("?" where unreadable).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

// TestClusterTorchGroupTwoNodes (make test-cluster): the trainer is one
// torch.distributed group spanning two asyncrl node processes
// (trainer.exec_nodes 2 × exec_ranks 2 = world 4, gloo over loopback):
// the holder runs ranks 0–1 and hosts the rendezvous, the other trainer
// node's rank host runs ranks 2–3 (cluster/rankhost). Two runs:
//
//   - clean: the run finishes with every step's prompts trained exactly
//     once (the ledger line), the group's four ranks on the two nodes;
//   - kill-remote-rank: after step 3 is durable one of the other node's
//     ranks is SIGKILLed. The step fails for the whole group, the holder
//     replaces all four ranks (a torch.distributed group takes no new
//     member) from its last completed state and the run finishes, the
//     holder keeping its lease, again every prompt trained exactly once.
func TestClusterTorchGroupTwoNodes(t *testing.T) {
	e2eEnabled(t)
	yaml := torchGroupYAML(t) + "  exec_nodes: 2\n"
	bin := clustertest.BuildBinary(t)
	const steps = 8
	for _, kill := range []bool{false, true} {
		name := map[bool]string{false: "clean", true: "kill-remote-rank"}[kill]
		t.Run(name, func(t *testing.T) {
			start, load0 := time.Now(), loadAvg()
			defer func() {
				t.Logf("TORCHNODES run=%s result=%s took=%s load=%s→%s", name, map[bool]string{false: "pass", true: "FAIL"}[t.Failed()],
					time.Since(start).Round(time.Second), load0, loadAvg())
			}()
			c := newE2EClusterBin(t, bin, steps, 3, 3)
			c.yaml = yaml
			nodes := []*proc{c.start(0, "trainer,engine,controller,publisher"), c.start(1, "trainer,engine,controller,publisher"),
				c.start(2, "engine,rollout")}
			holderP, otherP, hname, oname := pickHolder(t, nodes[:2], 1)
			local, remote := waitRanks(t, holderP, hname), waitRanks(t, otherP, oname+"'s hosted")
			hrecs0, orecs0 := holderP.records(t), otherP.records(t)
			if kill {
				clustertest.WaitFor(t, 3*time.Minute, hname+" to make step 3 durable", func() bool { return lastDurable(holderP.records(t)) >= 3 })
				if before := lastDurable(holderP.records(t)); before >= steps-1 {
					t.Fatalf("the run reached step %d of %d before the kill: no step left to prove the group's restart", before, steps)
				}
				victim := remote[0]
				if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
					t.Fatalf("kill %s's rank pid %d: %v", oname, victim, err)
				}
				t.Logf("killed %s's hosted rank pid %d (holder %s ranks %v, hosted %v)", oname, victim, hname, local, remote)
				clustertest.WaitFor(t, 3*time.Minute, "the whole group to restart on both nodes", func() bool {
					l, r := rankPIDs(holderP.Cmd.Process.Pid), rankPIDs(otherP.Cmd.Process.Pid)
					fresh := func(now, was []int) bool {
						return len(now) == 2 && !slices.ContainsFunc(now, func(p int) bool { return slices.Contains(was, p) })
					}
					return fresh(l, local) && fresh(r, remote)
				})
			}
			clustertest.WaitFor(t, 6*time.Minute, hname+" to finish the run", func() bool {
				return countKind(holderP.records(t), term.RunComplete) > 0 && clustertest.LedgerLine.MatchString(holderP.Out.String())
			})
			checkLedgerLine(t, holderP.Out.String(), steps)
			if got := lastDurable(holderP.records(t)); got != steps {
				t.Errorf("last durable step %d; want %d", got, steps)
			}
			hrecs, orecs := holderP.records(t)[len(hrecs0):], otherP.records(t)[len(orecs0):]
			if countKind(hrecs, term.LeaseLost) > 0 || countKind(hrecs, term.LeaseAcquired)+countKind(orecs, term.LeaseAcquired) > 0 {
				t.Errorf("%s lost its term while its group spanned %s:\n%s", hname, oname, lossLines(hrecs))
			}
		})
	}
}
