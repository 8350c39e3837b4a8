package agent

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyncrl/asyncrl/cluster"
	"github.com/asyncrl/asyncrl/cluster/internal/clustertest"
	"github.com/asyncrl/asyncrl/cluster/ledger"
	"github.com/asyncrl/asyncrl/cluster/node"
	"github.com/asyncrl/asyncrl/cluster/placement"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/internal/syncbuf"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// externalBus starts an embedded NATS server the agents share (as an
// existing NATS cluster would be), so stopping one agent keeps the bus.
func externalBus(t *testing.T) string {
	t.Helper()
	opts := natsbus.DefaultOptions()
	opts.Name = "test-cluster"
	b, err := natsbus.Connect(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b.ClientURL()
}

// testAgent starts an agent on the test's shared bus url with loopback
// gossip and a 1 s lease (unless c says otherwise); it fails the test if
// the agent does not start.
func testAgent(t *testing.T, url string, c Config) *Agent {
	t.Helper()
	c.NATSURL = url
	if c.Gossip == "" {
		c.Gossip = "127.0.0.1:0"
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = time.Second
	}
	a, err := Start(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func agentRunConfig(t *testing.T, steps int) config.Config {
	cfg := config.Default()
	cfg.Run.Steps = steps
	cfg.Run.DataDir = t.TempDir()
	cfg.Run.ReportDir = t.TempDir()
	return cfg
}

func TestAgentRejectsUnknownRole(t *testing.T) {
	_, err := Start(context.Background(), Config{Name: "n1", Roles: []string{"engine", "traner"}, Run: config.Default()})
	if !errors.Is(err, ErrConfig) || !errors.Is(err, placement.ErrUnknownRole) || !strings.Contains(err.Error(), `"traner"`) ||
		!strings.Contains(err.Error(), "known roles: all, bus, engine") {
		t.Fatalf("err = %v; want ErrConfig wrapping ErrUnknownRole naming traner and the known roles", err)
	}
	if _, err := ParseRoles("router,,engine"); err != nil {
		t.Fatalf("ParseRoles: %v", err)
	}
}

// --router-listen must name an address other nodes can dial; off loopback
// the term's router needs an admin token (checked when a term starts).
func TestRouterListenValidated(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:9000", ":9000", "[::]:9000", "nonsense"} {
		_, err := Start(context.Background(), Config{Name: "n1", Roles: []string{placement.Trainer},
			RouterListen: addr, Run: config.Default()})
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "--router-listen") {
			t.Errorf("--router-listen %q: err = %v; want ErrConfig naming the flag", addr, err)
		}
	}
	cfg := agentRunConfig(t, 1)
	n, err := node.New(cfg, node.Options{InMemoryBus: true, RouterListen: "192.0.2.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	err = n.Start(context.Background())
	n.Stop()
	if err == nil || !strings.Contains(err.Error(), "AdminToken") {
		t.Fatalf("a router off loopback without an admin token started (err %v)", err)
	}
}

// A second live node with a taken name fails fast and says who holds it;
// the holder keeps running.
func TestAgentDuplicateName(t *testing.T) {
	url := externalBus(t)
	ctx := context.Background()
	a1 := testAgent(t, url, Config{Name: "n1", Roles: []string{placement.Engine}, Run: agentRunConfig(t, 1)})
	defer a1.Stop()
	start := time.Now()
	a2, err := Start(ctx, Config{Name: "n1", Roles: []string{placement.Engine}, NATSURL: url,
		Gossip: "127.0.0.1:0", Run: agentRunConfig(t, 1)})
	if err == nil {
		a2.Stop()
		t.Fatal("a second node named n1 started")
	}
	if !errors.Is(err, cluster.ErrNameInUse) || !strings.Contains(err.Error(), `"n1"`) {
		t.Fatalf("err = %v; want ErrNameInUse naming n1", err)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("the duplicate took %s to fail; the bound is TTL + renew", d)
	}
	if len(a1.Members()) != 1 || a1.Members()[0].Name != "n1" {
		t.Errorf("members = %v; want only the first n1", a1.Members())
	}
}

var stepRe = regexp.MustCompile(`node (\w+): step (\d+) version`)

// lastStep is the last durable step an agent reported.
func lastStep(events string) int {
	m := stepRe.FindAllStringSubmatch(events, -1)
	if len(m) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(m[len(m)-1][2])
	return n
}

// Two trainer nodes: the first holds the lease and trains; when it stops,
// the standby takes over from the last durable step and finishes the run,
// and the durable ledger shows every prompt trained once, filtered or
// requeued (none in flight, no transition refused).
func TestAgentStandbyTakesOver(t *testing.T) {
	url := externalBus(t)
	ctx := context.Background()
	const steps = 8
	var ev1, ev2 syncbuf.Buffer
	mk := func(name string, ev *syncbuf.Buffer) *Agent {
		return testAgent(t, url, Config{Name: name, Roles: []string{placement.Trainer, placement.Engine}, Run: agentRunConfig(t, steps), Events: ev})
	}
	a1 := mk("n1", &ev1)
	defer a1.Stop()
	clustertest.WaitFor(t, 30*time.Second, "n1 to train 3 steps", func() bool { return lastStep(ev1.String()) >= 3 })
	a2 := mk("n2", &ev2)
	defer a2.Stop()
	if strings.Contains(ev2.String(), "lease trainer acquired") {
		t.Fatalf("the standby acquired the lease while n1 held it:\n%s", ev2.String())
	}
	a1.Stop()
	stopped := lastStep(ev1.String())
	clustertest.WaitFor(t, 60*time.Second, "n2 to finish the run", func() bool {
		_, ok := a2.FinalLedger()
		return ok
	})
	out := ev2.String()
	if !strings.Contains(out, "lease trainer acquired") {
		t.Fatalf("n2 never took the lease:\n%s", out)
	}
	resumed := regexp.MustCompile(`resume from step (\d+)`).FindStringSubmatch(out)
	if resumed == nil {
		t.Fatalf("no resume line:\n%s", out)
	}
	if from, _ := strconv.Atoi(resumed[1]); from != stopped {
		t.Errorf("n2 resumed from step %d; n1's last durable step was %d", from, stopped)
	}
	if got := lastStep(out); got != steps {
		t.Errorf("n2's last step %d; want %d\n%s\nn1:\n%s", got, steps, out, ev1.String())
	}
	c, _ := a2.FinalLedger()
	b := config.Default().Trainer.MiniBatchSize
	if c.InFlight != 0 || c.Refused != 0 || c.Trained != steps*b {
		t.Errorf("final ledger %+v; want %d trained (B=%d per step, none twice), none in flight, none refused", c, steps*b, b)
	}
	// n1's term's weight bucket went with its term; n2's own is there.
	tok1 := regexp.MustCompile(`lease trainer acquired token (\d+)`).FindStringSubmatch(ev1.String())[1]
	tok2 := regexp.MustCompile(`lease trainer acquired token (\d+)`).FindStringSubmatch(out)[1]
	js, err := jetstream.New(a2.bus.Conn())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.ObjectStore(ctx, "asyncrl-weights-local-t"+tok1); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Errorf("n1's term's weight bucket: %v, want it deleted", err)
	}
	if _, err := js.ObjectStore(ctx, "asyncrl-weights-local-t"+tok2); err != nil {
		t.Errorf("n2's term's weight bucket: %v", err)
	}
	select {
	case <-a2.Done():
	default:
		t.Error("Done not closed after the run finished")
	}
	// A standby that joins after the end sees the run complete too.
	var ev3 syncbuf.Buffer
	a3 := mk("n3", &ev3)
	defer a3.Stop()
	clustertest.WaitFor(t, 10*time.Second, "the late standby's Done", func() bool {
		select {
		case <-a3.Done():
			return true
		default:
			return false
		}
	})
	if !strings.Contains(ev3.String(), "run complete at step 8 (trained by n2)") {
		t.Errorf("late standby events:\n%s", ev3.String())
	}
}

// ledgerAgent is an agent named name with only a durable ledger (run id
// run, in memory) on a bus of its own: enough for its ledger methods.
func ledgerAgent(t *testing.T, run, name string) (*Agent, *ledger.Ledger) {
	t.Helper()
	opts := natsbus.DefaultOptions()
	opts.URL = externalBus(t)
	b, err := natsbus.Connect(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	cfg := ledger.DefaultConfig(run)
	cfg.Memory = true
	l, err := ledger.Open(context.Background(), b.Conn(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &Agent{cfg: Config{Name: name}, led: l}, l
}

// Out-of-order ledger events (a retried publish) are repaired: attempt 1
// consumed before attempt 0's requeue, and that requeue arriving late.
// A second train is still refused.
func TestRecordEventRepairsReorder(t *testing.T) {
	ctx := context.Background()
	a, l := ledgerAgent(t, "reorder", "n1")
	ev := func(state messages.LedgerState, attempt int32) messages.PromptLedger {
		return messages.PromptLedger{Header: messages.Header{Sender: "n1"}, PromptID: "t1/p1", GroupID: "g" + strconv.Itoa(int(attempt)), State: state, Attempt: attempt}
	}
	for i, e := range []messages.PromptLedger{ev(messages.LedgerConsumed, 0), ev(messages.LedgerConsumed, 1),
		ev(messages.LedgerRequeued, 0), ev(messages.LedgerTrained, 1)} {
		if err := a.recordEvent(ctx, e); err != nil {
			t.Fatalf("event %d (%s attempt %d): %v", i, e.State, e.Attempt, err)
		}
	}
	got, ok, err := l.Get(ctx, "t1/p1")
	if err != nil || !ok || got.State != messages.LedgerTrained || got.Attempt != 1 {
		t.Fatalf("entry %+v ok %v err %v; want trained attempt 1", got, ok, err)
	}
	if err := a.recordEvent(ctx, ev(messages.LedgerTrained, 2)); !errors.Is(err, ledger.ErrAlreadyTrained) {
		t.Errorf("a second train: err %v; want ErrAlreadyTrained", err)
	}
	// A late copy of a consumed event (a publish retried through an
	// election) after its attempt settled is superseded, not refused: a
	// refused consumed transition would end the term.
	for _, late := range []messages.PromptLedger{ev(messages.LedgerConsumed, 0), ev(messages.LedgerConsumed, 1)} {
		if err := a.recordEvent(ctx, late); err != nil {
			t.Errorf("late consumed attempt %d: %v", late.Attempt, err)
		}
	}
	if got, _, _ := l.Get(ctx, "t1/p1"); got.State != messages.LedgerTrained || got.Attempt != 1 {
		t.Errorf("entry after late copies %+v; want trained attempt 1", got)
	}
}

// A holder whose side loses quorum stops training and gives the lease up;
// a node on the majority side takes over.
func TestAgentMinorityStopsTraining(t *testing.T) {
	url := externalBus(t)
	var ev1, ev2 syncbuf.Buffer
	mk := func(name string, ev *syncbuf.Buffer) *Agent {
		return testAgent(t, url, Config{Name: name, Roles: []string{placement.Trainer, placement.Engine}, Run: agentRunConfig(t, 50), Events: ev})
	}
	a1 := mk("n1", &ev1)
	defer a1.Stop()
	clustertest.WaitFor(t, 30*time.Second, "n1 to train a step", func() bool { return lastStep(ev1.String()) >= 1 })
	a2 := mk("n2", &ev2)
	defer a2.Stop()
	// n1 knows {n1, m1, m2} and both others died: its side is a minority
	// (n2 runs its own gossip, so its side keeps quorum).
	a1.mu.Lock()
	a1.quorum.Joined("m1")
	a1.quorum.Joined("m2")
	a1.quorum.Failed("m1")
	a1.quorum.Failed("m2")
	a1.mu.Unlock()
	clustertest.WaitFor(t, 10*time.Second, "n1 to stop training", func() bool { return strings.Contains(ev1.String(), "lost quorum: training stops") })
	// n1 resigns only after its pipeline stopped, so its last step is
	// final once n2 holds the lease.
	clustertest.WaitFor(t, 20*time.Second, "n2 to take the lease over", func() bool { return strings.Contains(ev2.String(), "lease trainer acquired") })
	stopped := lastStep(ev1.String())
	clustertest.WaitFor(t, 20*time.Second, "n2 to train", func() bool { return lastStep(ev2.String()) > stopped })
	if got := lastStep(ev1.String()); got != stopped {
		t.Errorf("n1 trained on to step %d after losing quorum at step %d", got, stopped)
	}
	if n := strings.Count(ev1.String(), "lease trainer acquired"); n != 1 {
		t.Errorf("n1 acquired the lease %d times; a minority must not contend", n)
	}
}

// The prompts a durable step names are marked trained — by the holder
// right after it saved the step, or by the next holder when the first died
// in between — and the controller's own trained event, landing before or
// after, is a duplicate rather than a refusal. Without this, a holder
// killed between saving step S and mirroring its trained events left S's
// prompts in flight and the next holder requeued prompts whose training
// the durable weights already hold.
func TestMarkTrainedCompletesADurableStep(t *testing.T) {
	ctx := context.Background()
	a, l := ledgerAgent(t, "marktrained", "n2")
	consumed := func(p, g string, attempt int32) {
		t.Helper()
		if _, _, err := l.Record(ctx, messages.PromptLedger{Header: messages.Header{Sender: "n1"}, PromptID: p, GroupID: g,
			State: messages.LedgerConsumed, Attempt: attempt}); err != nil {
			t.Fatal(err)
		}
	}
	consumed("t1/a", "ga", 0)
	consumed("t1/b", "gb", 1)
	consumed("t1/c", "gc", 0) // not in the step: stays in flight, for RequeueNode
	// The controller's trained event for a landed first.
	if err := a.recordEvent(ctx, messages.PromptLedger{Header: messages.Header{Sender: "n1"}, PromptID: "t1/a", GroupID: "ga",
		State: messages.LedgerTrained, Attempt: 0}); err != nil {
		t.Fatal(err)
	}
	step := []ledger.PromptAttempt{{PromptID: "t1/a", GroupID: "ga", Attempt: 0}, {PromptID: "t1/b", GroupID: "gb", Attempt: 1}}
	if err := a.markTrained(ctx, 3, step, nil); err != nil {
		t.Fatalf("markTrained: %v", err)
	}
	// Again (a retried takeover): still no error.
	if err := a.markTrained(ctx, 3, step, nil); err != nil {
		t.Fatalf("markTrained twice: %v", err)
	}
	for _, p := range []string{"t1/a", "t1/b"} {
		if e, ok, err := l.Get(ctx, p); err != nil || !ok || e.State != messages.LedgerTrained {
			t.Errorf("%s: %+v %v %v; want trained", p, e, ok, err)
		}
	}
	rq, err := l.RequeueNode(ctx, "n1", "n2")
	if err != nil || len(rq) != 1 || rq[0].PromptID != "t1/c" {
		t.Fatalf("requeued %+v, %v; want only t1/c", rq, err)
	}
}

// With two members, the lower-named one leaving cleanly (Ctrl-C) must not
// stop the other: its NodeLeaving drops it from the voters, where gossip
// alone would count it as failed and leave the survivor without quorum.
func TestCleanLeaveKeepsQuorum(t *testing.T) {
	url := externalBus(t)
	var ev1, ev2 syncbuf.Buffer
	a1 := testAgent(t, url, Config{Name: "n1", Roles: []string{placement.Engine}, Run: agentRunConfig(t, 200), Events: &ev1})
	defer a1.Stop()
	a2 := testAgent(t, url, Config{Name: "n2", Roles: []string{placement.Trainer, placement.Engine}, Join: []string{a1.ms.Addr()}, Run: agentRunConfig(t, 200), Events: &ev2})
	defer a2.Stop()
	clustertest.WaitFor(t, 30*time.Second, "n2 to train 2 steps", func() bool { return lastStep(ev2.String()) >= 2 })
	a1.Stop()
	clustertest.WaitFor(t, 10*time.Second, "n2 to see n1 leave", func() bool { return strings.Contains(ev2.String(), "member left n1") })
	at := lastStep(ev2.String())
	clustertest.WaitFor(t, 30*time.Second, "n2 to train on after n1 left", func() bool { return lastStep(ev2.String()) >= at+3 })
	if strings.Contains(ev2.String(), "lost quorum") {
		t.Fatalf("n2 lost quorum when n1 left cleanly:\n%s", ev2.String())
	}
}

// Issue 37: the ledger's summary counts every refused transition — a
// trained mark refused as much as a pipeline event — across the run's
// nodes: the refusals are kept in the durable ledger, so the finishing
// node's line counts those of a node that refused them and died. Before,
// a refused mark was only logged ("ledger: trained mark refused") and the
// summary said "refused 0".
func TestLedgerSummaryCountsRefusedMarks(t *testing.T) {
	ctx := context.Background()
	a, l := ledgerAgent(t, "refusedmarks", "n1")
	var ev syncbuf.Buffer
	a.cfg.Events = &ev
	if _, _, err := l.Record(ctx, messages.PromptLedger{Header: messages.Header{Sender: "n1"}, PromptID: "t1/a", GroupID: "ga",
		State: messages.LedgerConsumed}); err != nil {
		t.Fatal(err)
	}
	// t1/b's consumed transition never reached the ledger.
	step := []ledger.PromptAttempt{{PromptID: "t1/a", GroupID: "ga"}, {PromptID: "t1/b", GroupID: "gb"}}
	done := map[string]bool{}
	if err := a.markTrained(ctx, 5, step, done); err != nil {
		t.Fatalf("markTrained: %v", err)
	}
	if !done["t1/a"] || !done["t1/b"] || a.refused.Load() != 1 {
		t.Fatalf("done %v, refused %d; want both settled, one refused", done, a.refused.Load())
	}
	// A retry of the same step writes nothing again and counts nothing again.
	if err := a.markTrained(ctx, 5, step, done); err != nil || a.refused.Load() != 1 {
		t.Fatalf("retried marks: %v, refused %d", err, a.refused.Load())
	}
	// Another node (a holder that died) refused a requeue: kept durably.
	other := ledger.RefusalOf(messages.PromptLedger{PromptID: "t1/c", GroupID: "gc", State: messages.LedgerRequeued}, "n3",
		errors.New("ledger: illegal transition: requeued before it was consumed"), time.Now())
	if err := l.RecordRefusal(ctx, other); err != nil {
		t.Fatal(err)
	}
	if err := a.reportLedger(ctx); err != nil {
		t.Fatal(err)
	}
	c, ok := a.FinalLedger()
	if !ok || c.Refused != 2 || c.Trained != 1 {
		t.Fatalf("final ledger %+v (%v); want 1 trained, 2 refused", c, ok)
	}
	out := ev.String()
	for _, want := range []string{"ledger refused by n1: t1/b trained", "ledger refused by n3: t1/c requeued", "ledger prompts 1 trained 1 filtered 0 requeued 0 in_flight 0 refused 2"} {
		if !strings.Contains(out, want) {
			t.Errorf("events lack %q:\n%s", want, out)
		}
	}
}

// The soak's standby-06-seed1005 ended "in_flight 1": the mirror's stop
// took a write still in progress (held by a stream's election) for quiet,
// the run's end swept the ledger, and the write landed after the sweep.
// stop waits while an event is being recorded (at most 5 s), and wait
// (the run's end) until it is recorded.
func TestMirrorStopWaitsForTheWriteInProgress(t *testing.T) {
	opts := natsbus.DefaultOptions()
	opts.URL = externalBus(t)
	b, err := natsbus.Connect(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sub, err := b.Subscribe("mirror.test", func(*transport.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	m := &mirror{sub: sub, conn: b.Conn(), busy: true} // a write in progress; the last one long ago
	stopped := make(chan struct{})
	go func() { m.stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("stop returned while an event was being recorded")
	case <-time.After(500 * time.Millisecond):
	}
	m.mu.Lock()
	m.busy, m.last = false, time.Now()
	m.mu.Unlock()
	clustertest.WaitFor(t, 5*time.Second, "stop to return once the write is done", func() bool {
		select {
		case <-stopped:
			return true
		default:
			return false
		}
	})
	m.mu.Lock()
	m.busy = true
	m.mu.Unlock()
	start := time.Now()
	go func() {
		time.Sleep(300 * time.Millisecond) // the write lands
		m.mu.Lock()
		m.busy = false
		m.mu.Unlock()
	}()
	m.wait(10 * time.Second)
	if took := time.Since(start); took < 300*time.Millisecond || took > 5*time.Second {
		t.Fatalf("wait returned after %s; want once the write landed (300 ms)", took)
	}
}

// Gossip off loopback needs a key; on loopback (":port" binds 127.0.0.1
// here) it does not. The check runs before anything starts.
func TestGossipOffLoopbackNeedsKey(t *testing.T) {
	_, err := Start(context.Background(), Config{Name: "n1", Roles: []string{placement.Engine},
		Gossip: "192.0.2.1:7946", Run: config.Default()})
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "--gossip-key-file") || !strings.Contains(err.Error(), "192.0.2.1:7946") {
		t.Fatalf("err = %v; want ErrConfig naming the address and --gossip-key-file", err)
	}
	for _, addr := range []string{"127.0.0.1:7946", ":7946", "localhost:7946"} {
		c := Config{Name: "n1", Roles: []string{placement.Engine}, Gossip: addr, Run: config.Default()}
		if err := c.normalize(); err != nil {
			t.Errorf("--gossip %s: %v", addr, err)
		}
	}
	c := Config{Name: "n1", Roles: []string{placement.Engine}, Gossip: "192.0.2.1:7946",
		GossipKeys: [][]byte{make([]byte, 32)}, Run: config.Default()}
	if err := c.normalize(); err != nil {
		t.Fatalf("off loopback with a key: %v", err)
	}
}
