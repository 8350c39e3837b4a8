package agent

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/cluster/internal/clustertest"
	"github.com/asyncrl/asyncrl/cluster/term"
	"github.com/asyncrl/asyncrl/config"
)

// The end-to-end cluster test builds the asyncrl binary and runs three
// `asyncrl node` processes; it takes about 30 s on two cores, so it runs
// only with ASYNCRL_CLUSTER_E2E=1 (make test-cluster).
func e2eEnabled(t *testing.T) {
	t.Helper()
	if os.Getenv("ASYNCRL_CLUSTER_E2E") != "1" {
		t.Skip("set ASYNCRL_CLUSTER_E2E=1 (make test-cluster) to run three asyncrl node processes")
	}
}

// proc is one asyncrl node process.
type proc struct {
	*clustertest.Proc
	// evPath is the node's --events-json file ("": none).
	evPath string
}

func startNode(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	return startProc(t, exec.Command(bin, append([]string{"node", "--log-level", "warn"}, args...)...), args[1])
}

// startProc starts cmd (clustertest.StartProc).
func startProc(t *testing.T, cmd *exec.Cmd, name string) *proc {
	t.Helper()
	return &proc{Proc: clustertest.StartProc(t, cmd, name)}
}

// e2eCluster is three asyncrl node processes' shared setup: gossip and
// NATS route ports on loopback, one config file and data dir per node.
type e2eCluster struct {
	t      *testing.T
	bin    string
	dir    string
	steps  int
	ports  []int
	routes []string
	// servers: nodes n1…n<servers> host the NATS cluster's servers (all
	// three by default); replicas is their JetStream replication.
	servers, replicas int
	// nats is the client URLs of the servers, for nodes that host none.
	nats string
	// yaml is appended to every node's config file.
	yaml string
	// starts counts the nodes started (each start its own events file);
	// started: the nodes started at least once.
	starts  int
	started map[int]bool
	// extra, when set, gives node i's further flags (the secure
	// walkthrough's TLS, route auth and role permissions).
	extra func(i int) []string
}

func newE2ECluster(t *testing.T, steps int) *e2eCluster {
	return newE2EClusterServers(t, steps, 3, 3)
}

// newE2EClusterServers: only the first servers nodes host NATS servers.
func newE2EClusterServers(t *testing.T, steps, servers, replicas int) *e2eCluster {
	return newE2EClusterBin(t, clustertest.BuildBinary(t), steps, servers, replicas)
}

// newE2EClusterBin is newE2EClusterServers with a binary already built
// (the soak builds it once for all its runs).
func newE2EClusterBin(t *testing.T, bin string, steps, servers, replicas int) *e2eCluster {
	c := &e2eCluster{t: t, bin: bin, dir: t.TempDir(), steps: steps, ports: clustertest.FreePorts(t, 6), servers: servers, replicas: replicas}
	for i := range servers {
		c.routes = append(c.routes, "nats-route://127.0.0.1:"+strconv.Itoa(c.ports[3+i]))
	}
	return c
}

func (c *e2eCluster) gossip(i int) string { return "127.0.0.1:" + strconv.Itoa(c.ports[i]) }

// start runs node n<i+1> with roles (again with the same name, ports and
// data dir when it ran before).
func (c *e2eCluster) start(i int, roles string) *proc {
	t := c.t
	cfg := filepath.Join(c.dir, fmt.Sprintf("n%d.yaml", i+1))
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "run:\n  data_dir: %s\n  report_dir: %s\n%s",
		filepath.Join(c.dir, fmt.Sprintf("d%d", i+1)), filepath.Join(c.dir, "report"), c.yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--name", fmt.Sprintf("n%d", i+1), "--config", cfg, "--roles", roles, "--steps", strconv.Itoa(c.steps),
		"--gossip", c.gossip(i), "--replicas", strconv.Itoa(c.replicas), "--lease-ttl", "2s",
		// A step here takes about a second: a term without one for 90 s is
		// stuck, and steps down (printed "term stalled") so the run goes on;
		// so is one not started 60 s after its claim (a term starts in
		// seconds; a takeover's elections on a loaded machine, in 20).
		"--stall-after", "90s", "--start-after", "60s"}
	c.starts++
	ev := filepath.Join(c.dir, fmt.Sprintf("n%d-%d.events.jsonl", i+1, c.starts))
	args = append(args, "--events-json", ev)
	if i < c.servers {
		args = append(args, "--cluster-listen", strings.TrimPrefix(c.routes[i], "nats-route://"), "--routes", strings.Join(c.routes, ","))
	} else {
		args = append(args, "--nats", c.nats)
	}
	// n2 and n3 join n1 at first; a node started again (after a kill)
	// joins whichever of the others answers — n1 may be the dead one, and
	// a restarted n1 that joined nobody would gossip alone.
	if c.started == nil {
		c.started = map[int]bool{}
	}
	switch {
	case c.started[i]:
		var others []string
		for j := range 3 {
			if j != i {
				others = append(others, c.gossip(j))
			}
		}
		args = append(args, "--join", strings.Join(others, ","))
	case i > 0:
		args = append(args, "--join", c.gossip(0))
	}
	c.started[i] = true
	if c.extra != nil {
		args = append(args, c.extra(i)...)
	}
	p := startNode(t, c.bin, args...)
	p.evPath = ev
	return p
}

// pickHolder waits until one of the trainer nodes (n1, n2) trained
// minSteps and returns it (holder) and the other (standby) with names.
func pickHolder(t *testing.T, trainers []*proc, minSteps int) (holder, standby *proc, hname, sname string) {
	t.Helper()
	// Within --stall-after plus a second term's start: a first term stuck
	// while starting steps down and the next one trains.
	clustertest.WaitFor(t, 150*time.Second, fmt.Sprintf("a trainer node to hold the lease and train %d steps", minSteps), func() bool {
		for i, p := range trainers {
			if lastDurable(p.records(t)) >= minSteps {
				holder, standby = p, trainers[1-i]
				hname, sname = fmt.Sprintf("n%d", i+1), fmt.Sprintf("n%d", 2-i)
				return true
			}
		}
		return false
	})
	return holder, standby, hname, sname
}

// checkLedgerLine: the finishing node's ledger line shows every prompt
// trained once, filtered or requeued: B per step, none in flight, none
// refused (clustertest.CheckLedgerLine).
func checkLedgerLine(t *testing.T, out string, steps int) {
	t.Helper()
	if err := clustertest.CheckLedgerLine(out, steps, config.Default().Trainer.MiniBatchSize); err != nil {
		t.Error(err)
	}
}

// removedAt records when a node's output first showed "routing remove
// <url>" (after from, an offset in its output) for each of urls.
type removedAt struct {
	p    *proc
	from int
	t0   time.Time
	at   map[string]time.Duration
}

func (r *removedAt) sample(urls []string) {
	out := r.p.Out.String()
	if r.from > len(out) {
		return
	}
	for _, u := range urls {
		if _, ok := r.at[u]; !ok && strings.Contains(out[r.from:], "routing remove "+u+"\n") {
			r.at[u] = time.Since(r.t0)
		}
	}
}

// TestClusterKillTrainerNode: three nodes on loopback with an embedded
// NATS cluster (R3 leases and ledger); SIGKILL the node holding the
// trainer lease mid-run. The standby takes over from the last durable
// step, the survivors see the dead node leave within the failure-detection
// bound, the standby's router never keeps the dead node's engines beyond
// that bound, and the final durable ledger shows every prompt trained
// once, filtered or requeued: none in flight, no transition refused,
// exactly B prompts trained per step.
func TestClusterKillTrainerNode(t *testing.T) {
	e2eEnabled(t)
	const steps = 16
	c := newE2ECluster(t, steps)
	// The trainer nodes host engines too, so the dead holder leaves
	// engines behind in gossip until its death is detected.
	trainers := []*proc{c.start(0, "trainer,engine,controller,publisher"), c.start(1, "trainer,engine,controller,publisher")}
	n3 := c.start(2, "engine,rollout")
	holder, standby, hname, sname := pickHolder(t, trainers, 3)
	if countKind(standby.records(t), term.LeaseAcquired) > 0 {
		t.Fatalf("%s acquired the trainer lease while %s held it", sname, hname)
	}
	deadURLs := hostURLs(t, holder.Out.String())
	if err := holder.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	<-holder.Exited
	printed := lastDurable(holder.records(t))
	// The standby's removals count from its lease acquisition (its term's
	// router starts empty); sampled while the test waits.
	rm := &removedAt{p: standby, from: -1, t0: killed, at: map[string]time.Duration{}}
	var acquired time.Duration
	sample := func() {
		if rm.from < 0 {
			out := standby.Out.String()
			if i := strings.Index(out, "lease trainer acquired"); i >= 0 {
				rm.from, acquired = i, time.Since(killed)
			}
		}
		if rm.from >= 0 {
			rm.sample(deadURLs)
		}
	}
	var detected time.Duration
	clustertest.WaitFor(t, 20*time.Second, "n3 to see the holder leave", func() bool {
		sample()
		if strings.Contains(n3.Out.String(), "member left "+hname) {
			detected = time.Since(killed)
			return true
		}
		return false
	})
	// memberlist: probe 500ms + suspicion ≈ 3s measured; 8s leaves room
	// for a loaded CI machine.
	if detected > 8*time.Second {
		t.Errorf("%s's death noticed after %s; the bound is about 3 s", hname, detected)
	}
	t.Logf("%s killed after step %d; its death noticed in %s", hname, printed, detected)
	clustertest.WaitFor(t, 90*time.Second, "the standby to finish the run", func() bool {
		sample()
		return strings.Contains(standby.Out.String(), "ledger prompts")
	})
	t.Logf("standby %s acquired the lease %s after the kill, finished %s after it", sname,
		acquired.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
	out, recs := standby.Out.String(), standby.records(t)
	resumed := ofKind(recs, term.Resumed)
	if len(resumed) == 0 {
		t.Fatalf("the standby never resumed:\n%s", out)
	}
	// The holder reports a step after saving it, so the durable step is the last
	// reported one or, if the kill fell between save and report, the next.
	if from := int(resumed[0].Step); from != printed && from != printed+1 {
		t.Errorf("the standby resumed from step %d; the holder's last durable step was %d", from, printed)
	}
	if requeued(recs) == 0 || lastDurable(recs) != steps || countKind(recs, term.RunComplete) == 0 {
		t.Errorf("the standby did not requeue the holder's prompts, did not reach step %d or did not complete the run:\n%s", steps, out)
	}
	// The dead holder's engines: never routed by the standby's term, or
	// removed within the failure-detection bound (≈ 3 s + one 250ms poll
	// by design; 8 s on a loaded machine), and never added back.
	term := out[rm.from:]
	for _, u := range deadURLs {
		add := strings.LastIndex(term, "routing add "+u+"\n")
		if add < 0 {
			t.Logf("dead engine %s: never routed by %s", u, sname)
			continue
		}
		d, ok := rm.at[u]
		switch {
		case !ok || strings.LastIndex(term, "routing remove "+u+"\n") < add:
			t.Errorf("%s routes to the dead %s's engine %s (added, never removed after)", sname, hname, u)
		case d > 8*time.Second:
			t.Errorf("%s removed the dead engine %s %s after the kill; the bound is about 3 s", sname, u, d)
		default:
			t.Logf("dead engine %s: routed by %s, removed %s after the kill", u, sname, d.Round(time.Millisecond))
		}
	}
	checkLedgerLine(t, out, steps)
}

// TestClusterEngineNodeRestart: n1 and n2 contend for the trainer lease
// and host engines, n3 is engine-only. SIGKILL n3 mid-run: the holder
// stops routing to its engines within the failure-detection bound and
// trains on with its own. Restart n3 under the same name: its new engines
// catch up to the holder's current version before they get traffic, the
// holder routes to them (add, then ready), and the run ends with a clean
// ledger.
//
// n3 hosts no NATS server (it is a client of n1's and n2's): killing a
// node that hosts one can cost the holder its lease (a renewal that falls
// in the lease stream's leader election fails, and the holder steps down;
// the next term resumes from the checkpoint), which is not what this test
// is about: it asserts the holder keeps its one term.
func TestClusterEngineNodeRestart(t *testing.T) {
	e2eEnabled(t)
	const steps = 40
	c := newE2EClusterServers(t, steps, 2, 2)
	// The engines play their modelled durations in real time (10 ms a
	// decode step; default 0.1×): steps take long enough on the wall
	// clock for n3's death, restart and catch-up to fall within the run.
	c.yaml = "engines:\n  time_scale: 1\n"
	trainers := []*proc{c.start(0, "trainer,engine,controller,publisher"), c.start(1, "trainer,engine,controller,publisher")}
	busRe := regexp.MustCompile(`node n\d: bus (\S+)`)
	var buses []string
	clustertest.WaitFor(t, 30*time.Second, "n1's and n2's NATS servers", func() bool {
		buses = buses[:0]
		for _, p := range trainers {
			if m := busRe.FindStringSubmatch(p.Out.String()); m != nil {
				buses = append(buses, m[1])
			}
		}
		return len(buses) == 2
	})
	c.nats = strings.Join(buses, ",")
	n3 := c.start(2, "engine")
	holder, _, hname, _ := pickHolder(t, trainers, 3)
	oldURLs := hostURLs(t, n3.Out.String())
	for _, u := range oldURLs {
		if !strings.Contains(holder.Out.String(), "routing add "+u+"\n") {
			t.Errorf("%s trained 3 steps without routing to n3's %s", hname, u)
		}
	}
	if err := n3.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	atKill := lastDurable(holder.records(t))
	<-n3.Exited
	rm := &removedAt{p: holder, from: len(holder.Out.String()), t0: killed, at: map[string]time.Duration{}}
	clustertest.WaitFor(t, 8*time.Second, hname+" to stop routing to the dead n3's engines", func() bool {
		rm.sample(oldURLs)
		return len(rm.at) == len(oldURLs)
	})
	var worst time.Duration
	for _, d := range rm.at {
		worst = max(worst, d)
	}
	t.Logf("n3 killed at %s's step %d; its engines out of routing %s after the kill", hname, atKill, worst.Round(time.Millisecond))

	// n3's name claim outlives the process by its TTL: retry the start
	// while the new process says the name is still in use.
	var n3b *proc
	var before int64
	var restarted time.Time
	clustertest.WaitFor(t, 30*time.Second, "n3 to restart under its name", func() bool {
		before = lastVersion(holder.Out.String())
		restarted = time.Now()
		p := c.start(2, "engine")
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			select {
			case <-p.Exited:
				if !strings.Contains(p.ErrOut.String()+p.Out.String(), "name in use") {
					t.Fatalf("the restarted n3 exited:\n%s\n%s", p.Out.String(), clustertest.LastLines(p.ErrOut.String(), 15))
				}
				time.Sleep(500 * time.Millisecond) // back off: the claim's TTL runs on
				return false
			default:
			}
			if strings.Contains(p.Out.String(), "node n3: gossip ") {
				n3b = p
				return true
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("the restarted n3 neither joined nor exited in 30 s:\n%s", p.Out.String())
		return false
	})
	t.Logf("n3 restarted %s after the kill, when %s was at version %d", restarted.Sub(killed).Round(time.Millisecond), hname, before)
	newURLs := hostURLs(t, n3b.Out.String())
	var catchUp time.Duration
	clustertest.WaitFor(t, 60*time.Second, "n3's engines to catch up", func() bool {
		v, _ := caughtUp(t, n3b.Out.String(), "n3", termBases(holder.Out.String()))
		if len(v) == len(newURLs) {
			catchUp = time.Since(restarted)
			return true
		}
		return false
	})
	t.Logf("the restarted n3's engines caught up %s after its start", catchUp.Round(time.Millisecond))
	clustertest.WaitFor(t, 120*time.Second, hname+" to finish the run", func() bool {
		return strings.Contains(holder.Out.String(), "ledger prompts")
	})
	out, out3 := holder.Out.String(), n3b.Out.String()
	hrecs := holder.records(t)
	if n := countKind(hrecs, term.LeaseAcquired); n != 1 {
		t.Errorf("%s acquired the lease %d times; losing an engine node must not end its term", hname, n)
	}
	v3, at3 := caughtUp(t, out3, "n3", termBases(out))
	for name, v := range v3 {
		if v < before {
			t.Errorf("%s caught up to version %d; %s was at version %d when n3 restarted", name, v, hname, before)
		}
	}
	if servedAfterCatchUp(t, out3, v3, at3) == 0 {
		t.Errorf("no engine of the restarted n3 got a request before the run ended:\n%s", out3)
	}
	if strings.Contains(out3, "got a request before catching up") {
		t.Errorf("the restarted n3 served before catching up:\n%s", out3)
	}
	for _, u := range newURLs {
		add := strings.Index(out, "routing add "+u+"\n")
		ready := strings.Index(out, "routing ready "+u+"\n")
		if add < 0 || ready < add {
			t.Errorf("%s: routing add of n3's new %s at %d, ready at %d; want add, then ready", hname, u, add, ready)
		}
	}
	if lastDurable(hrecs) != steps {
		t.Errorf("%s's last step %d; want %d", hname, lastDurable(hrecs), steps)
	}
	checkLedgerLine(t, out, steps)
}
