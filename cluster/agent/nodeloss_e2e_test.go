package agent

import (
	"context"
	"fmt"
	"math/rand"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/cluster/internal/clustertest"
	"github.com/asyncrl/asyncrl/cluster/term"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// The node-loss acceptance tests (issues 20, 37), in make test-cluster: the
// three-node walkthrough of docs/cluster.md — n1 and n2 trainer+engine,
// n3 engine+rollout, each hosting one of the three embedded NATS servers,
// everything replicated 3 ways — loses one node to SIGKILL mid-run: the
// holder, the standby, or n3, ASYNCRL_CLUSTER_REPS times each (default 3),
// each kill at a moment drawn from ASYNCRL_CLUSTER_SEED (default the
// clock; logged): once a step is durable, or with the holder held at a
// hook (--hold-file) inside a checkpoint write, with a save outstanding,
// between a durable step and its marks, or inside a publish — and half
// the time with the victim's server leading the durable ledger's stream,
// so its death starts that stream's leader election.
// Every run must finish with the ledger check (steps × B trained, none in
// flight, none refused); losing a node other than the holder must not cost
// the holder its lease. The time from the kill to the next completed step
// is logged per run, with the median and max per victim (BENCHMARKS.md).
// TestClusterNATSServerLoss does the same with the nodes on an external
// three-server NATS cluster (processes started by the test), killing one
// server per run.

const lossSteps = 16

func reps(t *testing.T) int {
	if v := os.Getenv("ASYNCRL_CLUSTER_REPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("ASYNCRL_CLUSTER_REPS=%q: want a count ≥ 1", v)
		}
		return n
	}
	return 3
}

// lossRun is one run's measurements.
type lossRun struct {
	killToStep time.Duration
	// killToLease: kill → a new lease acquisition printed (0: none
	// before the next step).
	killToLease time.Duration
}

func summarize(t *testing.T, what string, runs []lossRun) {
	t.Helper()
	if len(runs) == 0 {
		return
	}
	var ds, ls []time.Duration
	for _, r := range runs {
		ds = append(ds, r.killToStep)
		if r.killToLease > 0 {
			ls = append(ls, r.killToLease)
		}
	}
	line := func(label string, ds []time.Duration) {
		if len(ds) == 0 {
			return
		}
		slices.Sort(ds)
		t.Logf("SUMMARY %s: kill → %s over %d runs: median %s, max %s (all: %v)", what, label, len(ds),
			ds[len(ds)/2].Round(10*time.Millisecond), ds[len(ds)-1].Round(10*time.Millisecond), ds)
	}
	line("next completed step", ds)
	line("a new lease holder", ls)
}

// clusterSeed is the seed of the kill tests' moments (logged, so a run
// replays with ASYNCRL_CLUSTER_SEED).
func clusterSeed(t *testing.T) int64 {
	t.Helper()
	seed := time.Now().UnixNano() % 1_000_000
	if v := os.Getenv("ASYNCRL_CLUSTER_SEED"); v != "" {
		s, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("ASYNCRL_CLUSTER_SEED=%q: want an integer", v)
		}
		seed = s
	}
	t.Logf("kill moments from seed %d (replay: ASYNCRL_CLUSTER_SEED=%d)", seed, seed)
	return seed
}

// lossMoment is a node-loss run's kill moment, drawn from the seed.
type lossMoment struct {
	moment string
	leads  bool
}

func TestClusterNodeLoss(t *testing.T) {
	e2eEnabled(t)
	rng := rand.New(rand.NewSource(clusterSeed(t)))
	results := map[string][]lossRun{}
	victims := []string{"holder", "standby", "n3"}
	for _, victim := range victims {
		for r := range reps(t) {
			m := lossMoment{moment: soakMoments[rng.Intn(len(soakMoments))], leads: rng.Intn(2) == 0}
			t.Run(fmt.Sprintf("kill-%s-%d-at-%s", victim, r+1, m.moment), func(t *testing.T) {
				c := newE2ECluster(t, lossSteps)
				results[victim] = append(results[victim], nodeLossRun(t, c, func(n []*proc, holder, standby int) (*proc, string) {
					switch victim {
					case "holder":
						return n[holder], fmt.Sprintf("n%d", holder+1)
					case "standby":
						return n[standby], fmt.Sprintf("n%d", standby+1)
					}
					return n[2], "n3"
				}, victim != "holder", m))
			})
		}
	}
	for _, v := range victims {
		summarize(t, "embedded servers, kill "+v, results[v])
	}
}

func TestClusterNATSServerLoss(t *testing.T) {
	e2eEnabled(t)
	rng := rand.New(rand.NewSource(clusterSeed(t)))
	var runs []lossRun
	for r := range reps(t) {
		m := lossMoment{moment: soakMoments[rng.Intn(len(soakMoments))]} // the servers are no nodes: none leads by choice
		t.Run(fmt.Sprintf("kill-server-%d-at-%s", r%3, m.moment), func(t *testing.T) {
			servers, urls := startNATSServers(t, 3)
			c := newE2EClusterServers(t, lossSteps, 0, 3)
			c.nats = strings.Join(urls, ",")
			runs = append(runs, nodeLossRun(t, c, func([]*proc, int, int) (*proc, string) {
				return servers[r%3], fmt.Sprintf("nats-server %d", r%3)
			}, false, m))
		})
	}
	summarize(t, "external NATS cluster, kill one server", runs)
}

// nodeLossRun starts the walkthrough's three nodes on c, waits until a
// holder trained 4 steps with n3's rollout actors in its term, kills the
// process pick names at moment m, and checks the run finishes cleanly.
// keepLease: the holder must keep its one term throughout.
func nodeLossRun(t *testing.T, c *e2eCluster, pick func(nodes []*proc, holder, standby int) (*proc, string), keepLease bool, m lossMoment) lossRun {
	holdFile := func(i int) string { return filepath.Join(c.dir, fmt.Sprintf("n%d.hold", i+1)) }
	c.extra = func(i int) []string { return []string{"--hold-file", holdFile(i)} }
	nodes := []*proc{c.start(0, "trainer,engine"), c.start(1, "trainer,engine"), c.start(2, "engine,rollout")}
	holderP, _, hname, _ := pickHolder(t, nodes[:2], 4)
	holder := slices.Index(nodes, holderP)
	standby := 1 - holder
	clustertest.WaitFor(t, 30*time.Second, "n3's rollout actors to follow the term", func() bool {
		return strings.Contains(nodes[2].Out.String(), "rollouts follow term")
	})
	victim, vname := pick(nodes, holder, standby)
	if m.leads && strings.HasPrefix(vname, "n") {
		if err := leadLedger(victim, vname); err != nil {
			t.Logf("%s could not take the ledger's leader: %v", vname, err)
		}
	}
	// Hold the holder at the moment's hook (a step already durable is the
	// "step" moment), kill inside the hold, then let the holder go on.
	if soakHoldMoments[m.moment] {
		before := countKindStr(nodes[holder].records(t), HoldKind)
		if err := os.WriteFile(holdFile(holder), []byte(m.moment), 0o644); err != nil {
			t.Fatal(err)
		}
		clustertest.WaitFor(t, 90*time.Second, hname+" to hold at "+m.moment, func() bool {
			return countKindStr(nodes[holder].records(t), HoldKind) > before
		})
	}
	offsets := make([]int, 2)
	for i := range 2 {
		offsets[i] = len(nodes[i].records(t))
	}
	if err := victim.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	<-victim.Exited
	_ = os.Remove(holdFile(holder))
	// The next completed step: the first step line any surviving trainer
	// node prints after the kill (and the first new lease on the way).
	var next, lease time.Duration
	clustertest.WaitFor(t, 120*time.Second, "a step after the kill of "+vname, func() bool {
		for i := range 2 {
			if nodes[i] == victim {
				continue
			}
			after := nodes[i].records(t)[offsets[i]:]
			if lease == 0 && countKind(after, term.LeaseAcquired) > 0 {
				lease = time.Since(killed)
			}
			if countKind(after, term.StepDurable) > 0 {
				next = time.Since(killed)
				return true
			}
		}
		return false
	})
	var fin *proc
	clustertest.WaitFor(t, 180*time.Second, "a node to finish the run", func() bool {
		for i := range 2 {
			if nodes[i] != victim && strings.Contains(nodes[i].Out.String(), "ledger prompts") {
				fin = nodes[i]
				return true
			}
		}
		return false
	})
	out, frecs := fin.Out.String(), fin.records(t)
	checkLedgerLine(t, out, lossSteps)
	if lastDurable(frecs) != lossSteps {
		t.Errorf("the finishing node's last step %d; want %d", lastDurable(frecs), lossSteps)
	}
	if countKind(frecs, term.RunComplete) == 0 {
		t.Errorf("the finishing node reported no run-complete event")
	}
	leases := countKind(nodes[0].records(t), term.LeaseAcquired) + countKind(nodes[1].records(t), term.LeaseAcquired)
	hout, hrecs := nodes[holder].Out.String(), nodes[holder].records(t)
	if keepLease {
		// Judged from the kill on: a term that failed before it (a
		// cluster starting under load) is not this loss's doing.
		hafter := hrecs[min(len(hrecs), offsets[holder]):]
		others := 0
		for i := range 2 {
			if i != holder && nodes[i] != victim {
				others += countKind(nodes[i].records(t)[min(len(nodes[i].records(t)), offsets[i]):], term.LeaseAcquired)
			}
		}
		if n := countKind(hafter, term.LeaseAcquired); n != 0 || countKind(hafter, term.LeaseLost) > 0 || others != 0 {
			t.Errorf("%s lost its term when %s died (%d acquisitions by it and %d by others after the kill, %d in all); a holder on a surviving node must keep its lease:\n%s",
				hname, vname, n, others, leases, hout)
		}
	}
	// What the trainer nodes did about the loss (leases, leader moves,
	// failing streams, step-downs), for the log; and each survivor's
	// events from the kill to its first durable step after it, timed from
	// the kill (where a slow recovery spent its time).
	for i := range 2 {
		t.Logf("n%d:\n%s", i+1, lossLines(nodes[i].records(t)))
		if nodes[i] != victim {
			if tl := recoveryTimeline(nodes[i].records(t)[offsets[i]:], killed); tl != "" {
				t.Logf("n%d after the kill:\n%s", i+1, tl)
			}
		}
	}
	t.Logf("killed %s (holder %s) at %s (leading the ledger: %v) after step %d; next step %s after the kill (new lease holder: %s); %d lease acquisitions in all",
		vname, hname, m.moment, m.leads, lastDurable(hrecs[:min(len(hrecs), offsets[holder])]), next.Round(10*time.Millisecond), lease.Round(10*time.Millisecond), leases)
	return lossRun{killToStep: next, killToLease: lease}
}

// natsServerEnv makes the test binary run one clustered NATS server
// (TestMain): "name clientPort routePort route,route,… storeDir".
const natsServerEnv = "ASYNCRL_TEST_NATS_SERVER"

// runTestNATSServer runs the server spec describes until SIGTERM (or a
// SIGKILL from the test); it is a process of its own so the test can kill
// it like a real nats-server.
func runTestNATSServer(spec string) int {
	f := strings.Fields(spec)
	if len(f) != 5 {
		fmt.Fprintf(os.Stderr, "%s=%q: want name clientPort routePort routes storeDir\n", natsServerEnv, spec)
		return 2
	}
	port, _ := strconv.Atoi(f[1])
	o := natsbus.DefaultOptions()
	o.Name, o.Port, o.StoreDir = f[0], port, f[4]
	o.Cluster = &natsbus.ClusterOptions{Name: "external", Listen: "127.0.0.1:" + f[2], Routes: strings.Split(f[3], ",")}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	b, err := natsbus.Connect(ctx, o)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer b.Close()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
	return 0
}

// startNATSServers starts n clustered NATS server processes (the test
// binary in server mode) and returns them with their client URLs.
func startNATSServers(t *testing.T, n int) ([]*proc, []string) {
	t.Helper()
	ports := clustertest.FreePorts(t, 2*n)
	var routes, urls []string
	for i := range n {
		routes = append(routes, "nats-route://127.0.0.1:"+strconv.Itoa(ports[n+i]))
		urls = append(urls, "nats://127.0.0.1:"+strconv.Itoa(ports[i]))
	}
	var out []*proc
	for i := range n {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=nats-%d %d %d %s %s", natsServerEnv, i, ports[i], ports[n+i],
			strings.Join(routes, ","), t.TempDir()))
		out = append(out, startProc(t, cmd, fmt.Sprintf("nats-%d", i)))
	}
	for i, u := range urls {
		clustertest.WaitFor(t, 30*time.Second, "nats server "+strconv.Itoa(i), func() bool {
			conn, err := net.DialTimeout("tcp", strings.TrimPrefix(u, "nats://"), time.Second)
			if err == nil {
				_ = conn.Close()
			}
			return err == nil
		})
	}
	return out, urls
}

// TestClusterKillScenarios: the soak's two-kill scenarios, in make
// test-cluster (ASYNCRL_CLUSTER_REPS runs each, moments from
// ASYNCRL_CLUSTER_SEED): two nodes killed one after another (the second
// during the first's stream elections, or after the first rejoined), and
// a node killed, restarted, rejoined and killed again. Each run must end
// clean: steps × B trained, nothing in flight, nothing refused, no term
// stalled. A failed run's logs, events and ledger are kept (logged).
func TestClusterKillScenarios(t *testing.T) {
	e2eEnabled(t)
	seed := clusterSeed(t)
	bin := clustertest.BuildBinary(t)
	b := config.Default().Trainer.MiniBatchSize
	for _, sc := range []string{"two", "rejoin"} {
		for r := range reps(t) {
			plan := drawSoakPlan(sc, seed+int64(r), lossSteps, soakMoments)
			t.Run(fmt.Sprintf("%s-%d", sc, r+1), func(t *testing.T) {
				res := runSoak(t, soakEnv{}, bin, plan, b)
				t.Logf("%s: %s", plan, res)
				if !res.clean() {
					dir, err := os.MkdirTemp("", "asyncrl-kill-"+sc+"-*")
					if err == nil {
						res.keep(t, dir, plan)
					}
					t.Errorf("%s %s: %s (kept under %s)", sc, plan, res, dir)
				}
			})
		}
	}
}
