package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/asyncrl/asyncrl/cluster/internal/clustertest"
	"github.com/asyncrl/asyncrl/cluster/ledger"
	"github.com/asyncrl/asyncrl/cluster/term"
	"github.com/asyncrl/asyncrl/cluster/termwatch"
	"github.com/asyncrl/asyncrl/config"
)

// Bounds of a soak run on a loaded machine: a first step, the moment of a
// kill, a rejoin, the run's end after the last kill.
const (
	soakFirstStep = 240 * time.Second
	soakMoment    = 180 * time.Second
	soakRejoin    = 120 * time.Second
	soakRestart   = 180 * time.Second
	soakFinish    = 600 * time.Second
)

// soakResult is what one run came to.
type soakResult struct {
	// stall: the run (or one of its terms) made no progress within its
	// bound: a term that never trained after its claim, no step after a
	// kill, no end.
	stall string
	// lost: the durable ledger's trained count is not steps × B, or a
	// prompt is still in flight; refused: it refused a transition.
	lost, refused bool
	ledgerLine    string
	// other: anything else that is wrong (the finishing node's last step).
	other string
	// notes: what happened (kills, moments missed), for the log.
	notes []string
	procs []*soakProc
}

func (r soakResult) clean() bool { return r.stall == "" && !r.lost && !r.refused && r.other == "" }

func (r soakResult) String() string {
	s := "clean"
	if !r.clean() {
		var bad []string
		if r.stall != "" {
			bad = append(bad, "stall: "+r.stall)
		}
		if r.lost {
			bad = append(bad, "lost prompts")
		}
		if r.refused {
			bad = append(bad, "refused transitions")
		}
		if r.other != "" {
			bad = append(bad, r.other)
		}
		s = "FAILED (" + strings.Join(bad, "; ") + ")"
	}
	if r.ledgerLine != "" {
		s += " [" + r.ledgerLine + "]"
	}
	if len(r.notes) > 0 {
		s += " {" + strings.Join(r.notes, "; ") + "}"
	}
	return s
}

// soakProc is one process of a node (a restart is another).
type soakProc struct {
	*proc
	name  string // n1, n2, n3
	idx   int
	roles string
	hold  string // its --hold-file
	dead  bool
}

// soakRun is one run in progress.
type soakRun struct {
	t     *testing.T
	env   soakEnv
	c     *e2eCluster
	plan  soakPlan
	res   *soakResult
	holds bool
	// live: the current process of each node (nil when dead).
	live [3]*soakProc
	// lastKill: when the last kill was done.
	lastKill time.Time
}

var soakRoles = [3]string{"trainer,engine", "trainer,engine", "engine,rollout"}

// runSoak runs plan on a fresh three-node cluster and judges it; it never
// fails t (the soak tallies and keeps what failed).
func runSoak(t *testing.T, env soakEnv, bin string, plan soakPlan, b int) (res soakResult) {
	r := &soakRun{t: t, env: env, c: newE2EClusterBin(t, bin, plan.steps, 3, 3), plan: plan, res: &res}
	for _, k := range plan.kills {
		r.holds = r.holds || soakHoldMoments[k.moment]
	}
	if r.holds {
		r.c.extra = func(i int) []string { return []string{"--hold-file", r.holdFile(i)} }
	}
	for i := range 3 {
		r.startNode(i)
	}
	if !r.waitUntil(soakFirstStep, func() bool { return r.maxDurable() >= 1 }) {
		res.stall = fmt.Sprintf("start: no step durable within %s", soakFirstStep)
		return res
	}
	// pending: a killed node to restart right after the next kill (an
	// election kill comes first; the cluster is a server short of a
	// quorum until then).
	var prev, pending string
	for ki, k := range plan.kills {
		if k.victim == "same" {
			k.victim = prev
		}
		name, ok := r.kill(k, ki)
		if !ok {
			return res
		}
		if pending != "" {
			if !r.restart(pending, false) {
				return res
			}
			pending = ""
		}
		if name == "" { // missed: the run finished first
			break
		}
		prev = name
		next := soakKill{}
		if ki+1 < len(plan.kills) {
			next = plan.kills[ki+1]
		}
		switch {
		case k.restart && next.moment == "election":
			pending = name
		case k.restart:
			if !r.restart(name, true) {
				return res
			}
		}
	}
	if pending != "" && !r.restart(pending, false) {
		return res
	}
	r.finish(b)
	return res
}

func (r *soakRun) holdFile(i int) string { return filepath.Join(r.c.dir, fmt.Sprintf("n%d.hold", i+1)) }

func (r *soakRun) note(format string, args ...any) {
	r.res.notes = append(r.res.notes, fmt.Sprintf(format, args...))
}

// startNode starts node i (again, after a kill: retried while its name
// claim outlives the dead process).
func (r *soakRun) startNode(i int) *soakProc {
	p := &soakProc{proc: r.c.start(i, soakRoles[i]), name: fmt.Sprintf("n%d", i+1), idx: i, roles: soakRoles[i]}
	if r.holds {
		p.hold = r.holdFile(i)
	}
	r.live[i] = p
	r.res.procs = append(r.res.procs, p)
	return p
}

// waitUntil polls cond every 50 ms for d.
func (r *soakRun) waitUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}

// maxDurable is the largest durable step any trainer process printed.
func (r *soakRun) maxDurable() int {
	m := 0
	for _, p := range r.res.procs {
		if strings.Contains(p.roles, "trainer") {
			m = max(m, lastDurable(p.records(r.t)))
		}
	}
	return m
}

// holder is the live trainer process that holds the lease now (its last
// lease event an acquisition, the largest token), or nil.
func (r *soakRun) holder() *soakProc {
	var best *soakProc
	var bestTok uint64
	for _, p := range r.live {
		if p == nil || !strings.Contains(p.roles, "trainer") {
			continue
		}
		var tok uint64
		for _, rec := range p.records(r.t) {
			switch rec.Kind {
			case term.LeaseAcquired.String():
				tok = rec.Token
			case term.LeaseLost.String(), term.Resigned.String():
				tok = 0
			}
		}
		if tok > bestTok {
			best, bestTok = p, tok
		}
	}
	return best
}

// victim resolves a kill's victim to a live process.
func (r *soakRun) victim(who string) *soakProc {
	switch who {
	case "n3":
		return r.live[2]
	case "holder":
		return r.holder()
	case "standby":
		h := r.holder()
		for _, p := range r.live[:2] {
			if p != nil && p != h {
				return p
			}
		}
		return r.live[2] // none left (the other trainer died first): n3
	}
	for _, p := range r.live {
		if p != nil && p.name == who {
			return p
		}
	}
	return nil
}

// kill waits for k's moment and SIGKILLs its victim; the victim's name
// ("" when the moment never came: the run finished first), false when
// the run stalled. A second kill comes a step after the first victim's
// rejoin at the earliest, an election kill right after the first.
func (r *soakRun) kill(k soakKill, ki int) (string, bool) {
	step := k.step
	if ki > 0 {
		step = max(step, r.maxDurable()+1)
	}
	if k.moment == "election" {
		step = 0 // at once: the elections take 4–9 s to start
	}
	if !r.waitUntil(soakMoment, func() bool { return r.maxDurable() >= step || r.finished() != nil }) {
		r.res.stall = fmt.Sprintf("kill %d: step %d not reached within %s", ki+1, k.step, soakMoment)
		return "", false
	}
	if r.finished() != nil {
		r.note("kill %d missed: the run finished first", ki+1)
		return "", true
	}
	var held *soakProc
	switch {
	case k.moment == "election":
	case soakHoldMoments[k.moment]:
		held = r.arm(k.moment)
		if held == nil {
			r.note("kill %d: no holder to hold at %s; killed at once", ki+1, k.moment)
		}
	}
	v := r.victim(k.victim)
	if v == nil {
		r.note("kill %d: no live %s", ki+1, k.victim)
		r.disarm(held)
		return "", true
	}
	if k.leads && (r.env.leads != "never") || r.env.leads == "always" {
		if err := r.lead(v); err != nil {
			r.note("kill %d: %s could not take the ledger's leader: %v", ki+1, v.name, err)
		}
	}
	if err := v.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		r.t.Logf("kill %s: %v", v.name, err)
	}
	r.lastKill = time.Now()
	<-v.Exited
	r.disarm(held)
	v.dead = true
	r.live[v.idx] = nil
	r.note("killed %s (%s) at %s, durable step %d%s", v.name, k.victim, k.moment, r.maxDurable(), map[bool]string{true: ", leading the ledger"}[k.leads && r.env.leads != "never" || r.env.leads == "always"])
	return v.name, true
}

// ledgerStream is the durable prompt ledger's KV stream (cluster/ledger).
var ledgerStream = "KV_asyncrl_" + config.Default().Run.ID + "_prompts"

// lead makes p's server the leader of the durable prompt ledger's stream
// (a JetStream leader stepdown with p's server preferred), so killing p
// starts an election of it. It waits until the stream reports p leading.
func (r *soakRun) lead(p *soakProc) error { return leadLedger(p.proc, p.name) }

// leadLedger makes node name's server (process p) lead the durable
// prompt ledger's stream.
func leadLedger(p *proc, name string) error {
	m := regexp.MustCompile(`node n\d: bus (\S+)`).FindStringSubmatch(p.Out.String())
	if m == nil {
		return fmt.Errorf("no bus line")
	}
	nc, err := nats.Connect(m[1], nats.Timeout(5*time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	info := func() (string, error) {
		msg, err := nc.Request("$JS.API.STREAM.INFO."+ledgerStream, nil, 5*time.Second)
		if err != nil {
			return "", err
		}
		var si struct {
			Cluster struct {
				Leader string `json:"leader"`
			} `json:"cluster"`
		}
		err = json.Unmarshal(msg.Data, &si)
		return si.Cluster.Leader, err
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if l, err := info(); err == nil && l == name {
			return nil
		}
		req := fmt.Sprintf(`{"placement":{"preferred":%q}}`, name)
		_, _ = nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+ledgerStream, []byte(req), 5*time.Second)
		time.Sleep(500 * time.Millisecond)
	}
	l, err := info()
	return fmt.Errorf("the ledger's leader is %q (%v)", l, err)
}

// arm makes the holder stop at moment (its hold file) and waits until it
// does; nil when no holder held there in time (it is disarmed then).
func (r *soakRun) arm(moment string) *soakProc {
	h := r.holder()
	if h == nil {
		return nil
	}
	before := countKindStr(h.records(r.t), HoldKind)
	if err := os.WriteFile(h.hold, []byte(moment), 0o644); err != nil {
		r.t.Fatal(err)
	}
	if r.waitUntil(90*time.Second, func() bool { return countKindStr(h.records(r.t), HoldKind) > before || h.dead }) && !h.dead {
		return h
	}
	r.disarm(h)
	return nil
}

func (r *soakRun) disarm(p *soakProc) {
	if p != nil {
		_ = os.Remove(p.hold)
	}
}

// restart starts node name again (retrying while its dead claim lasts)
// and, when wait, waits until it rejoined: its engines caught up to the
// holder's term.
func (r *soakRun) restart(name string, wait bool) bool {
	i := int(name[1] - '1')
	var p *soakProc
	// One process at a time: one that exits saying its name is still
	// held (the dead claim's TTL runs on) is started again after a pause;
	// one that is starting is waited for — a node that rejoins a cluster
	// short of a JetStream quorum waits for its meta leader and its name
	// claim (up to 90 s by design).
	deadline := time.Now().Add(soakRestart)
	for p == nil {
		c := r.startNode(i)
		up := r.waitUntil(time.Until(deadline), func() bool {
			select {
			case <-c.Exited:
				return true
			default:
			}
			return strings.Contains(c.Out.String(), "node "+name+": gossip ")
		})
		select {
		case <-c.Exited:
			c.dead, r.live[i] = true, nil
			if !strings.Contains(c.ErrOut.String()+c.Out.String(), "name in use") || time.Now().After(deadline) {
				r.res.other = fmt.Sprintf("restart of %s failed: it exited", name)
				return false
			}
			time.Sleep(500 * time.Millisecond) // a pause before the next try: the dead claim's TTL runs on
			continue
		default:
		}
		if !up {
			r.res.other = fmt.Sprintf("restart of %s failed: not in gossip %s after", name, soakRestart)
			return false
		}
		p = c
	}
	r.note("restarted %s", name)
	if !wait {
		return true
	}
	if !r.waitUntil(soakRejoin, func() bool { return strings.Contains(p.Out.String(), "caught up to version") || r.finished() != nil }) {
		r.note("%s did not catch up within %s", name, soakRejoin)
	}
	return true
}

// finished is the live process that printed the run's ledger line, or nil.
func (r *soakRun) finished() *soakProc {
	for _, p := range r.live {
		if p != nil && strings.Contains(p.Out.String(), "ledger prompts") {
			return p
		}
	}
	return nil
}

// finish waits for the run's end and judges its ledger line and its terms.
func (r *soakRun) finish(b int) {
	if !r.waitUntil(soakFinish, func() bool { return r.finished() != nil }) {
		r.res.stall = fmt.Sprintf("no node finished the run within %s of the last kill (durable step %d)", soakFinish, r.maxDurable())
		return
	}
	fin := r.finished()
	m := clustertest.LedgerLine.FindStringSubmatch(fin.Out.String())
	r.res.ledgerLine = m[0]
	n := func(i int) int { v, _ := strconv.Atoi(m[i]); return v }
	if n(2) != r.plan.steps*b || n(5) != 0 || n(2)+n(3)+n(4) != n(1) {
		r.res.lost = true
	}
	r.res.refused = n(6) != 0
	if last := lastDurable(fin.records(r.t)); last != r.plan.steps {
		r.res.other = fmt.Sprintf("the finishing node %s's last step %d, want %d", fin.name, last, r.plan.steps)
	}
	for _, p := range r.res.procs {
		for _, rec := range p.records(r.t) {
			if rec.StepDown && (rec.Reason == string(termwatch.NoStep) || rec.Reason == string(termwatch.NoStart)) {
				r.res.stall = fmt.Sprintf("%s: %s", p.name, rec.Line)
			}
		}
	}
}

// keep writes what a failed run leaves for its post-mortem into dir: each
// process's stdout, stderr and event stream, the plan, and the durable
// ledger (every prompt's entry and the progress) read from a live node.
func (r soakResult) keep(t *testing.T, dir string, plan soakPlan) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("keep: %v", err)
		return
	}
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Logf("keep: %v", err)
		}
	}
	write("plan.txt", fmt.Sprintf("%s %s\n%s\n", plan.scenario, plan, r))
	var bus string
	for i, p := range r.procs {
		base := fmt.Sprintf("%s-%d", p.name, i+1)
		write(base+".stdout", p.Out.String())
		write(base+".stderr", p.ErrOut.String())
		if b, err := os.ReadFile(p.evPath); err == nil {
			write(base+".events.jsonl", string(b))
		}
		if !p.dead {
			if m := regexp.MustCompile(`node n\d: bus (\S+)`).FindStringSubmatch(p.Out.String()); m != nil {
				bus = m[1]
			}
		}
	}
	if bus != "" {
		if err := dumpLedger(bus, filepath.Join(dir, "ledger.jsonl")); err != nil {
			t.Logf("keep: ledger: %v", err)
		}
	}
	// The goroutines of every live process (SIGQUIT: a Go process prints
	// them all and exits): where a stalled start waits is in there.
	for i, p := range r.procs {
		if p.dead {
			continue
		}
		_ = p.Cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-p.Exited:
		case <-time.After(10 * time.Second):
		}
		p.dead = true
		write(fmt.Sprintf("%s-%d.stderr", p.name, i+1), p.ErrOut.String())
	}
}

// dumpLedger writes the run's durable ledger, one entry a line, then its
// progress.
func dumpLedger(url, path string) error {
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := ledger.DefaultConfig(config.Default().Run.ID)
	cfg.Replicas = 3
	l, err := ledger.Open(ctx, nc, cfg)
	if err != nil {
		return err
	}
	all, err := l.Entries(ctx)
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	for _, e := range all {
		if err := enc.Encode(e); err != nil {
			return err
		}
	}
	p, _, err := l.Progress(ctx)
	if err != nil {
		return err
	}
	return enc.Encode(map[string]any{"progress": p})
}

// countKindStr is how many records of kind k rs holds.
func countKindStr(rs []EventRecord, k string) int {
	n := 0
	for _, r := range rs {
		if r.Kind == k {
			n++
		}
	}
	return n
}
