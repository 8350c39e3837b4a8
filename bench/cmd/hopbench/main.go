// Command hopbench measures the HTTP hop of `asyncrl router` against
// HAProxy side by side (issue 22; bench/haproxy.sh, `make
// bench-router-haproxy`): the same trivial backends, the same wrk load
// (bench/haproxy/session.lua: a small completions request with an
// X-Session-ID), interleaved cells at each connection count, and for the
// proxies the CPU seconds their process used per 10^5 requests
// (/proc/<pid>/stat utime+stime before and after each cell).
//
//	hopbench backend -listen 127.0.0.1:0        # a trivial backend (prints its URL)
//	hopbench run -asyncrl bin/asyncrl -wrk wrk -haproxy haproxy ...
//
// Targets: direct (wrk straight to one backend), haproxy_stick (stick
// table on the header + leastconn), haproxy_chash (consistent hash on the
// header), router (asyncrl router, -policy, default sticky_least_loaded)
// and router_chash (asyncrl router, consistent_hash).
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/template"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: hopbench backend|run [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "backend":
		err = backendMain(os.Args[2:])
	case "run":
		err = runMain(os.Args[2:])
	case "router":
		err = routerMain(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q (backend or run)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "hopbench:", err)
		os.Exit(1)
	}
}

// completion is a small vLLM-shaped answer (as bench/routerbench's
// trivial backend), so the proxies relay a realistic short body.
var completion = []byte(`{"id":"cmpl-1","object":"text_completion","created":0,"model":"m","choices":[{"index":0,"text":"hello world","logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`)

func backendHandler(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	switch r.URL.Path {
	case "/health":
		w.WriteHeader(http.StatusOK)
		return
	case "/metrics": // the router scrapes it; nothing to report
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusOK)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(completion)))
	_, _ = w.Write(completion)
}

func backendMain(args []string) error {
	fs := flag.NewFlagSet("backend", flag.ExitOnError)
	addr := fs.String("listen", "127.0.0.1:0", "address to serve on")
	_ = fs.Parse(args)
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fmt.Printf("http://%s\n", ln.Addr())
	return (&http.Server{Handler: http.HandlerFunc(backendHandler), ReadHeaderTimeout: 10 * time.Second}).Serve(ln)
}

// Cell is one (repetition, connections, target) measurement.
type Cell struct {
	Rep, Conns int
	Target     string
	Requests   int64
	Seconds    float64
	Errors     int64
	P50us      int64
	P99us      int64
	// CPUSeconds is the proxy process's utime+stime over the cell; for
	// direct, the backend's (a Go net/http server answering at once).
	CPUSeconds float64
}

// RPS is the cell's requests per second.
func (c Cell) RPS() float64 { return float64(c.Requests) / c.Seconds }

// CPUPer1e5 is the proxy's CPU seconds per 10^5 requests.
func (c Cell) CPUPer1e5() float64 {
	if c.Requests == 0 {
		return 0
	}
	return c.CPUSeconds / float64(c.Requests) * 1e5
}

type runConfig struct {
	asyncrl, asyncrlBase, wrk, haproxy, tmpl, lua, policy string
	targets                                               []string
	conns                                                 []int
	dur                                                   time.Duration
	reps, backends, routerProcs                           int
	jsonOut, profileDir, profileFront                     string
}

func runMain(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	var c runConfig
	var targets, conns string
	fs.StringVar(&c.asyncrl, "asyncrl", "bin/asyncrl", "asyncrl binary")
	fs.StringVar(&c.asyncrlBase, "asyncrl-base", "", "a second asyncrl binary (e.g. built before a change) for the router_base target: before/after in the same run")
	fs.StringVar(&c.wrk, "wrk", "wrk", "wrk binary")
	fs.StringVar(&c.haproxy, "haproxy", "haproxy", "haproxy binary")
	fs.StringVar(&c.tmpl, "template", "bench/haproxy/haproxy.cfg.tmpl", "HAProxy config template")
	fs.StringVar(&c.lua, "lua", "bench/haproxy/session.lua", "wrk script")
	fs.StringVar(&c.policy, "policy", "sticky_least_loaded", "policy of the router target")
	fs.StringVar(&targets, "targets", "direct,haproxy_stick,router,haproxy_chash,router_chash", "targets, comma-separated (direct, haproxy_stick, haproxy_chash, router, router_chash, router_base: -asyncrl-base with -policy, router_nethttp: -policy with --front net_http, router_loop: -policy with --front loop, router_fast: -policy with --front fast)")
	fs.StringVar(&conns, "conns", "1,16,64,256", "wrk connections per level, comma-separated")
	fs.DurationVar(&c.dur, "duration", 10*time.Second, "wrk duration of one cell")
	fs.IntVar(&c.reps, "reps", 3, "repetitions (target order rotates between them; medians over them)")
	fs.IntVar(&c.backends, "backends", 2, "trivial backends behind the proxies")
	fs.IntVar(&c.routerProcs, "router-procs", 1, "GOMAXPROCS of the router process (HAProxy runs one thread); 0 = Go's default")
	fs.StringVar(&c.jsonOut, "json", "", "write every cell as JSON to this file")
	fs.StringVar(&c.profileFront, "profile-front", "fast", "front end of the profiled router (fast, loop or net_http)")
	fs.StringVar(&c.profileDir, "profile", "", "after the cells, profile the router (-policy, CPU and allocations under wrk at the largest level) into this directory")
	_ = fs.Parse(args)
	c.targets = split(targets)
	for _, s := range split(conns) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return fmt.Errorf("-conns: bad level %q", s)
		}
		c.conns = append(c.conns, n)
	}
	cells, err := run(c)
	if err != nil {
		return err
	}
	if c.jsonOut != "" {
		b, _ := json.MarshalIndent(cells, "", " ")
		if err := os.WriteFile(c.jsonOut, b, 0o644); err != nil {
			return err
		}
	}
	fmt.Print(Table(cells, c.targets, c.conns))
	return nil
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// procs are the processes started for a run, stopped at the end.
type procs []*exec.Cmd

func (p *procs) start(name string, env []string, args ...string) (*exec.Cmd, io.Reader, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	// Children die with this process, even when it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("starting %s: %w", name, err)
	}
	*p = append(*p, cmd)
	return cmd, out, nil
}

func (p procs) stop() {
	for _, c := range slices.Backward(p) {
		_ = c.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = c.Process.Kill()
			<-done
		}
	}
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// waitHTTP polls url until it answers (any status) or 10 s pass.
func waitHTTP(url string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not come up: %w", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type target struct {
	url string
	pid int // 0: no proxy process (direct)
}

func run(c runConfig) ([]Cell, error) {
	var ps procs
	defer ps.stop()
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	backends, backendPid, err := startBackends(&ps, self, c.backends)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "hopbench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	targets, err := startTargets(&ps, c, tmp, backends, backendPid)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "# %s, %d cores, load %s; targets %v\n", time.Now().UTC().Format(time.RFC3339), runtime.NumCPU(), loadavg(), c.targets)
	var cells []Cell
	for rep := range c.reps {
		for li, n := range c.conns {
			order := slices.Clone(c.targets)
			rot := (rep + li) % len(order)
			order = append(order[rot:], order[:rot]...)
			for _, name := range order {
				cell, err := measure(c, targets[name], name, n)
				if err != nil {
					return nil, err
				}
				cell.Rep = rep
				cells = append(cells, cell)
				fmt.Fprintf(os.Stderr, "rep %d c=%-3d %-14s %8.0f req/s p50 %6d µs p99 %6d µs cpu %.3f s/1e5 err %d\n",
					rep, n, name, cell.RPS(), cell.P50us, cell.P99us, cell.CPUPer1e5(), cell.Errors)
			}
		}
	}
	if c.profileDir != "" {
		if err := profileRouter(&ps, c, backends); err != nil {
			return nil, err
		}
	}
	return cells, nil
}

// startBackends starts n backend processes of this binary and returns
// their URLs and the first one's pid.
func startBackends(ps *procs, self string, n int) (backends []string, backendPid int, err error) {
	for range n {
		cmd, out, err := ps.start(self, nil, "backend", "-listen", "127.0.0.1:0")
		if backendPid == 0 && err == nil {
			backendPid = cmd.Process.Pid
		}
		if err != nil {
			return nil, 0, err
		}
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil {
			return nil, 0, fmt.Errorf("backend: %w", err)
		}
		backends = append(backends, strings.TrimSpace(line))
	}
	return backends, backendPid, nil
}

// startTargets starts the proxies c.targets name in front of backends and
// waits for each target to answer /health.
func startTargets(ps *procs, c runConfig, tmp string, backends []string, backendPid int) (map[string]target, error) {
	// direct's CPU is the backend's: what Go's net/http server alone
	// costs per request, one side of the router's hop.
	targets := map[string]target{"direct": {url: backends[0], pid: backendPid}}
	if slices.Contains(c.targets, "haproxy_stick") || slices.Contains(c.targets, "haproxy_chash") {
		t, err := startHAProxy(ps, c, tmp, backends)
		if err != nil {
			return nil, err
		}
		targets["haproxy_stick"], targets["haproxy_chash"] = t[0], t[1]
	}
	for name, pol := range map[string]string{"router": c.policy, "router_chash": "consistent_hash", "router_base": c.policy, "router_nethttp": c.policy, "router_loop": c.policy, "router_fast": c.policy} {
		if !slices.Contains(c.targets, name) {
			continue
		}
		rc := c
		if name == "router_base" {
			if c.asyncrlBase == "" {
				return nil, errors.New("target router_base needs -asyncrl-base")
			}
			rc.asyncrl = c.asyncrlBase
		}
		t, err := startRouter(ps, rc, pol, backends, "", routerFront[name])
		if err != nil {
			return nil, err
		}
		targets[name] = t
	}
	for _, t := range c.targets {
		if _, ok := targets[t]; !ok {
			return nil, fmt.Errorf("unknown target %q", t)
		}
		if err := waitHTTP(targets[t].url + "/health"); err != nil {
			return nil, err
		}
	}
	return targets, nil
}

// routerFront is the --front a router target runs with ("" the default).
var routerFront = map[string]string{
	"router_nethttp": "net_http", // the same binary on net/http's server: before/after the fast front in one run
	"router_loop":    "loop",     // the same binary with the event-loop front
	"router_fast":    "fast",     // the same binary with a goroutine per connection
}

// measure runs one cell: a short warm-up, then wrk for c.dur at n
// connections, with the target process's CPU seconds around it.
func measure(c runConfig, t target, name string, n int) (Cell, error) {
	// A short warm-up opens the connections and fills pools.
	if _, err := runWrk(c, t.url, n, time.Second); err != nil {
		return Cell{}, fmt.Errorf("%s warm-up: %w", name, err)
	}
	cpu0, err := cpuSeconds(t.pid)
	if err != nil {
		return Cell{}, err
	}
	cell, err := runWrk(c, t.url, n, c.dur)
	if err != nil {
		return Cell{}, fmt.Errorf("%s at %d connections: %w", name, n, err)
	}
	cpu1, err := cpuSeconds(t.pid)
	if err != nil {
		return Cell{}, err
	}
	cell.Conns, cell.Target, cell.CPUSeconds = n, name, cpu1-cpu0
	return cell, nil
}

func startHAProxy(ps *procs, c runConfig, tmp string, backends []string) ([2]target, error) {
	var out [2]target
	tmpl, err := template.ParseFiles(c.tmpl)
	if err != nil {
		return out, err
	}
	p1, err := freePort()
	if err != nil {
		return out, err
	}
	p2, err := freePort()
	if err != nil {
		return out, err
	}
	var hostports []string
	for _, b := range backends {
		hostports = append(hostports, strings.TrimPrefix(b, "http://"))
	}
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, map[string]any{"StickPort": p1, "ChashPort": p2, "Backends": hostports}); err != nil {
		return out, err
	}
	cfg := filepath.Join(tmp, "haproxy.cfg")
	if err := os.WriteFile(cfg, buf.Bytes(), 0o644); err != nil {
		return out, err
	}
	// -db: foreground, no master process, so the pid is the one thread's.
	cmd, _, err := ps.start(c.haproxy, nil, "-db", "-f", cfg)
	if err != nil {
		return out, err
	}
	out[0] = target{url: fmt.Sprintf("http://127.0.0.1:%d", p1), pid: cmd.Process.Pid}
	out[1] = target{url: fmt.Sprintf("http://127.0.0.1:%d", p2), pid: cmd.Process.Pid}
	return out, nil
}

func startRouter(ps *procs, c runConfig, pol string, backends []string, pprof, front string) (target, error) {
	p, err := freePort()
	if err != nil {
		return target{}, err
	}
	args := []string{"router", "--listen", fmt.Sprintf("127.0.0.1:%d", p), "--policy", pol}
	for _, b := range backends {
		args = append(args, "--engine", b)
	}
	if front != "" {
		args = append(args, "--front", front)
	}
	var env []string
	if c.routerProcs > 0 {
		env = append(env, "GOMAXPROCS="+strconv.Itoa(c.routerProcs))
	}
	bin := c.asyncrl
	if pprof != "" { // the same router in this program, with net/http/pprof
		bin, args = os.Args[0], append(args, "--pprof", pprof)
	}
	cmd, _, err := ps.start(bin, env, args...)
	if err != nil {
		return target{}, err
	}
	return target{url: fmt.Sprintf("http://127.0.0.1:%d", p), pid: cmd.Process.Pid}, nil
}

// profileRouter starts the router (hopbench router: the handler of
// asyncrl router, plus pprof) and loads it at the largest level while
// taking a 10 s CPU profile, then saves its allocation profile.
func profileRouter(ps *procs, c runConfig, backends []string) error {
	if err := os.MkdirAll(c.profileDir, 0o755); err != nil {
		return err
	}
	pp, err := freePort()
	if err != nil {
		return err
	}
	pprofAddr := fmt.Sprintf("127.0.0.1:%d", pp)
	t, err := startRouter(ps, c, c.policy, backends, pprofAddr, c.profileFront)
	if err != nil {
		return err
	}
	if err := waitHTTP(t.url + "/health"); err != nil {
		return err
	}
	pprofAddr = "http://" + pprofAddr
	errc := make(chan error, 1)
	go func() {
		_, err := runWrk(c, t.url, c.conns[len(c.conns)-1], 12*time.Second)
		errc <- err
	}()
	time.Sleep(time.Second)
	for _, p := range []struct{ path, file string }{
		{"/debug/pprof/profile?seconds=10", "cpu.pprof"},
		{"/debug/pprof/allocs", "allocs.pprof"},
	} {
		resp, err := http.Get(pprofAddr + p.path)
		if err != nil {
			return err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(c.profileDir, p.file), b, 0o644); err != nil {
			return err
		}
	}
	return <-errc
}

// runWrk runs one wrk cell and parses session.lua's HOPBENCH line.
func runWrk(c runConfig, url string, conns int, d time.Duration) (Cell, error) {
	threads := min(conns, 2)
	ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.wrk, "-t", strconv.Itoa(threads), "-c", strconv.Itoa(conns),
		"-d", fmt.Sprintf("%ds", max(int(d/time.Second), 1)), "--timeout", "10s", "-s", c.lua, url)
	cmd.Env = append(os.Environ(), "HOPBENCH_SESSIONS="+strconv.Itoa(max(conns/threads, 1)))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return Cell{}, fmt.Errorf("wrk: %w: %s", err, out)
	}
	return ParseWrk(out)
}

// ParseWrk reads the HOPBENCH line session.lua's done() prints.
func ParseWrk(out []byte) (Cell, error) {
	for _, line := range strings.Split(string(out), "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "HOPBENCH ")
		if !ok {
			continue
		}
		var c Cell
		var durUS int64
		for _, kv := range strings.Fields(rest) {
			k, v, _ := strings.Cut(kv, "=")
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return Cell{}, fmt.Errorf("wrk line %q: %s: %w", line, k, err)
			}
			switch k {
			case "requests":
				c.Requests = n
			case "duration_us":
				durUS = n
			case "errors":
				c.Errors = n
			case "p50_us":
				c.P50us = n
			case "p99_us":
				c.P99us = n
			}
		}
		if durUS <= 0 {
			return Cell{}, fmt.Errorf("wrk line %q: no duration", line)
		}
		c.Seconds = float64(durUS) / 1e6
		return c, nil
	}
	return Cell{}, errors.New("wrk printed no HOPBENCH line: " + string(out))
}

// cpuSeconds is utime+stime of pid from /proc/<pid>/stat (0 for pid 0).
func cpuSeconds(pid int) (float64, error) {
	if pid == 0 {
		return 0, nil
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return ParseStatCPU(b)
}

// clockTicks is USER_HZ, 100 on Linux amd64/arm64.
const clockTicks = 100

// ParseStatCPU returns utime+stime in seconds from a /proc/<pid>/stat
// line. The command name (field 2) may hold spaces and parentheses, so
// fields are counted after its last ')'.
func ParseStatCPU(stat []byte) (float64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("stat: no ')'")
	}
	f := strings.Fields(string(stat[i+1:]))
	// After ')': field 3 (state) is f[0], so utime (14) is f[11], stime (15) f[12].
	if len(f) < 13 {
		return 0, errors.New("stat: too few fields")
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return float64(u+s) / clockTicks, nil
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
