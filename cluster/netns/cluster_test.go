package netns

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/cluster/internal/clustertest"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/internal/certs"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(runHelper(mode))
	}
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// enabled skips unless ASYNCRL_NETNS=1 and namespaces can be made here.
func enabled(t *testing.T) {
	t.Helper()
	if os.Getenv("ASYNCRL_NETNS") != "1" {
		t.Skip("set ASYNCRL_NETNS=1 (make test-netns, as root) to run asyncrl nodes in network namespaces")
	}
	if err := Available(); err != nil {
		t.Skipf("make test-netns cannot run here: %v", err)
	}
}

// hosts: three nodes and the intruder (host index 3, address Subnet.4).
var hosts = []string{"n1", "n2", "n3", "intruder"}

var binDir, bin string

// asyncrlBin builds cmd/asyncrl once per test process.
func asyncrlBin(t *testing.T) string {
	t.Helper()
	if bin != "" {
		return bin
	}
	_, file, _, _ := runtime.Caller(0)
	var err error
	if binDir, err = os.MkdirTemp("", "asyncrl-netns-"); err != nil {
		t.Fatal(err)
	}
	b := filepath.Join(binDir, "asyncrl")
	cmd := exec.Command("go", "build", "-o", b, "./cmd/asyncrl")
	cmd.Dir = filepath.Join(filepath.Dir(file), "..", "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	bin = b
	return bin
}

// secrets are every credential of the cluster, made at test time as the
// walkthrough in docs/security.md makes them, and the intruder's own
// (another CA, its own gossip key, a guessed route password).
type secrets struct {
	cluster, foreign                     certs.Files
	routePW, gossipKey, engineKey, token string // files; token is the router admin token itself
	badRoutePW, badGossipKey             string
}

func makeSecrets(t *testing.T, dir string) secrets {
	t.Helper()
	var hs []string
	for i := range hosts {
		hs = append(hs, Subnet+strconv.Itoa(i+1))
	}
	var s secrets
	var err error
	if s.cluster, err = certs.Make(certs.Options{Dir: filepath.Join(dir, "certs"), Nodes: hosts[:3], Hosts: hs}); err != nil {
		t.Fatal(err)
	}
	if s.foreign, err = certs.Make(certs.Options{Dir: filepath.Join(dir, "foreign"), Nodes: []string{"intruder"}, Hosts: hs}); err != nil {
		t.Fatal(err)
	}
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	key := func(b byte) string {
		return base64.StdEncoding.EncodeToString([]byte(strings.Repeat(string(rune('a'+b)), 32)))
	}
	s.routePW = write("route-password", "netns-route-pw")
	s.badRoutePW = write("bad-route-password", "guessed-route-pw")
	s.gossipKey = write("gossip.key", key(1))
	s.badGossipKey = write("bad-gossip.key", key(2))
	s.engineKey = write("engine.key", "netns-engine-key")
	s.token = "netns-router-token"
	return s
}

// proc is one process in a namespace, its output captured.
type proc struct {
	*clustertest.Proc
	events string // its --events-json file
}

// startProc starts cmd (clustertest.StartProc).
func startProc(t *testing.T, cmd *exec.Cmd, name string) *proc {
	t.Helper()
	return &proc{Proc: clustertest.StartProc(t, cmd, name)}
}

// cluster is three asyncrl nodes in n1, n2, n3 with the walkthrough's
// security: TLS routes with a route password, role users, a gossip key,
// engine keys, routers with an admin token, every listener off loopback.
type cluster struct {
	t       *testing.T
	net     *Net
	dir     string
	sec     secrets
	steps   int
	starts  int
	started map[int]bool
	nodes   map[int]*proc
}

// newCluster makes the namespaces (removed at the end of the test, after
// every process is stopped) and, with netem set, shapes every link.
func newCluster(t *testing.T, steps int, netem string) *cluster {
	t.Helper()
	n, err := New(hosts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close) // registered first: runs after the processes stop
	if netem != "" {
		how, err := n.Netem(netem, netemOptions())
		if errors.Is(err, ErrNoNetem) {
			t.Skipf("netem %q: %v", netem, err)
		} else if err != nil {
			t.Fatal(err)
		}
		t.Logf("netem %q on every link by the %s", netem, how)
		t.Cleanup(func() { // before n.Close: what the links did
			if s := n.ImpairStats(); s != "" {
				t.Logf("userspace impairer, per direction (host → host): %s", s)
			}
		})
	}
	asyncrlBin(t)
	dir := t.TempDir()
	return &cluster{t: t, net: n, dir: dir, sec: makeSecrets(t, dir), steps: steps, started: map[int]bool{}, nodes: map[int]*proc{}}
}

// netemOptions: ASYNCRL_NETNS_NETEM picks the shaper (kernel, userspace;
// unset: the kernel's netem where the kernel has it), ASYNCRL_NETNS_SEED
// the userspace impairer's seed (34 unless set).
func netemOptions() NetemOptions {
	o := NetemOptions{Mode: os.Getenv("ASYNCRL_NETNS_NETEM"), Seed: 34}
	if s, err := strconv.ParseUint(os.Getenv("ASYNCRL_NETNS_SEED"), 10, 64); err == nil {
		o.Seed = s
	}
	return o
}

func (c *cluster) gossip(i int) string { return c.net.Addr(i) + ":7946" }

func (c *cluster) routes() string {
	var r []string
	for i := range 3 {
		r = append(r, "nats-route://"+c.net.Addr(i)+":6222")
	}
	return strings.Join(r, ",")
}

// start runs node n<i+1> with roles in its namespace.
func (c *cluster) start(i int, roles string) *proc {
	t, addr, name := c.t, c.net.Addr(i), hosts[i]
	cfg := filepath.Join(c.dir, name+".yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "run:\n  data_dir: %s\n  report_dir: %s\nengines:\n  listen_host: %s\n  api_key_file: %s\n",
		filepath.Join(c.dir, "d-"+name), filepath.Join(c.dir, "report"), addr, c.sec.engineKey), 0o644); err != nil {
		t.Fatal(err)
	}
	c.starts++
	ev := filepath.Join(c.dir, fmt.Sprintf("%s-%d.events.jsonl", name, c.starts))
	f := c.sec.cluster
	args := []string{"node", "--log-level", "warn", "--name", name, "--config", cfg, "--roles", roles, "--steps", strconv.Itoa(c.steps),
		"--gossip", c.gossip(i), "--gossip-key-file", c.sec.gossipKey, "--replicas", "3", "--lease-ttl", "2s",
		"--stall-after", "90s", "--start-after", "90s", "--events-json", ev,
		"--cluster-listen", addr + ":6222", "--routes", c.routes(),
		"--cluster-tls-ca", f.CA, "--cluster-tls-cert", f.Cert[name], "--cluster-tls-key", f.Key[name],
		"--route-user", "asyncrl", "--route-password-file", c.sec.routePW, "--role-permissions"}
	if strings.Contains(roles, "trainer") {
		args = append(args, "--router-listen", addr+":8000", "--router-admin-token", c.sec.token)
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
	p := startProc(t, c.net.Command(name, bin, args...), name)
	p.events = ev
	c.nodes[i] = p
	return p
}

// startAll starts the walkthrough's roles: n1 trainer+engine, n2 trainer
// (standby), n3 engine+rollout.
func (c *cluster) startAll() []*proc {
	return []*proc{c.start(0, "trainer,engine"), c.start(1, "trainer"), c.start(2, "engine,rollout")}
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// lastDurable is the newest durable step in an events file (0: none).
func lastDurable(path string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	last := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r struct {
			Kind string `json:"kind"`
			Step int    `json:"step"`
		}
		if json.Unmarshal(sc.Bytes(), &r) == nil && r.Kind == "step-durable" {
			last = max(last, r.Step)
		}
	}
	return last
}

// holder waits until n1 or n2 trained minSteps and returns its index.
func (c *cluster) holder(minSteps int) int {
	h := -1
	waitFor(c.t, 240*time.Second, fmt.Sprintf("a trainer to train %d steps", minSteps), func() bool {
		for i := range 2 {
			if p := c.nodes[i]; p != nil && lastDurable(p.events) >= minSteps {
				h = i
				return true
			}
		}
		return false
	})
	return h
}

// finished waits until a trainer node printed its final ledger line and
// checks it as the loopback cluster tests do (cluster/node
// checkLedgerLine): every step trained exactly once.
func (c *cluster) finished(within time.Duration) {
	t := c.t
	var out, by string
	waitFor(t, within, "a trainer node to finish the run", func() bool {
		for i := range 2 {
			if p := c.nodes[i]; p != nil && strings.Contains(p.Out.String(), "ledger prompts") {
				out, by = p.Out.String(), hosts[i]
				return true
			}
		}
		return false
	})
	if err := clustertest.CheckLedgerLine(out, c.steps, config.Default().Trainer.MiniBatchSize); err != nil {
		t.Error(err)
	} else {
		t.Logf("run finished by %s: %s", by, clustertest.LedgerLine.FindString(out))
	}
	for i, p := range c.nodes {
		all := p.Out.String() + p.ErrOut.String()
		if strings.Contains(all, "Permissions Violation") {
			t.Errorf("%s met a permission violation:\n%s", hosts[i], clustertest.LastLines(p.ErrOut.String(), 10))
		}
		if strings.Contains(all, "netns-route-pw") || strings.Contains(all, "netns-engine-key") {
			t.Errorf("%s printed a secret", hosts[i])
		}
	}
}
