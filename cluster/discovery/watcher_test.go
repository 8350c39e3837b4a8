package discovery_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/asyncrl/asyncrl/actors/router/proxy"
	"github.com/asyncrl/asyncrl/cluster"
	"github.com/asyncrl/asyncrl/cluster/discovery"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// memberlist's Shutdown does not wait for a probe already in flight; that
// goroutine ends on its own after the probe timeout.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"))
}

const run = "r1"

// proxy.Router is what discovery applies changes to.
var _ discovery.Router = (*proxy.Router)(nil)

func setup(t *testing.T, staleAfter time.Duration) (*natsbus.Bus, *proxy.Router, *discovery.Watcher) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := natsbus.Connect(ctx, natsbus.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	pc := proxy.DefaultConfig()
	pc.HealthInterval, pc.MetricsInterval = 0, 0 // discovery is the only source of truth here
	r, err := proxy.New(pc)
	if err != nil {
		t.Fatal(err)
	}
	wc := discovery.DefaultWatcherConfig(run)
	wc.Core.StaleAfter = staleAfter
	wc.TickInterval = staleAfter / 4
	w, err := discovery.NewWatcher(b, r, wc)
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(wctx) }()
	t.Cleanup(func() {
		wcancel()
		<-done
		_ = w.Close()
		_ = r.Shutdown(context.Background())
		_ = b.Close()
	})
	return b, r, w
}

func publish(t *testing.T, b *natsbus.Bus, engine string, kind transport.EngineTopic, m messages.Message) {
	t.Helper()
	data, err := messages.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	var subj string
	if kind == "" {
		subj = transport.MustSubject(run, transport.TopicWeights)
	} else if subj, err = transport.EngineSubject(run, engine, kind); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(context.Background(), subj, data); err != nil {
		t.Fatal(err)
	}
}

func announce(t *testing.T, b *natsbus.Bus, node, engine, url string, v int64) {
	t.Helper()
	h := messages.Header{RunID: run, Sender: node, Version: v}
	publish(t, b, engine, transport.EngineHealth, messages.EngineHealth{Header: h, Engine: engine, URL: url, Healthy: true})
	publish(t, b, engine, transport.EngineAck, messages.EngineVersionAck{Header: h, Engine: engine, URL: url})
}

// eligible lists the router's replicas that may take new sessions.
func eligible(r *proxy.Router) []string {
	var out []string
	for _, v := range r.Replicas() {
		if v.Eligible {
			out = append(out, v.URL)
		}
	}
	sort.Strings(out)
	return out
}

func replicas(r *proxy.Router) []string {
	var out []string
	for _, v := range r.Replicas() {
		out = append(out, v.URL)
	}
	sort.Strings(out)
	return out
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

func TestLeavingNodesEnginesLeaveRouting(t *testing.T) {
	b, r, w := setup(t, 3*time.Second)
	log := zerolog.Nop()
	// Two gossip members; the router's node feeds membership to the watcher.
	ca := cluster.DefaultMembershipConfig("node-a")
	ca.OnJoin = func(m cluster.Member) { w.MemberJoined(m.Name, m.Meta.Endpoints) }
	ca.OnLeave = func(m cluster.Member) { w.MemberLeft(m.Name) }
	ma, err := cluster.JoinCluster(ca, log)
	if err != nil {
		t.Fatal(err)
	}
	defer ma.Leave(time.Second)
	cb := cluster.DefaultMembershipConfig("node-b")
	cb.Join = []string{ma.Addr()}
	cb.Meta = cluster.NodeMeta{Roles: []string{"engine"}, Endpoints: map[string]string{"engine": "http://127.0.0.1:9001"}}
	mb, err := cluster.JoinCluster(cb, log)
	if err != nil {
		t.Fatal(err)
	}
	announce(t, b, "node-a", "ea", "http://127.0.0.1:9000", 0)
	announce(t, b, "node-b", "eb", "http://127.0.0.1:9001", 0)
	waitFor(t, 5*time.Second, "both engines routable", func() bool {
		return fmt.Sprint(eligible(r)) == "[http://127.0.0.1:9000 http://127.0.0.1:9001]"
	})
	// node-b goes away; memberlist tells node-a, and b's engine leaves the
	// table (not merely unhealthy: its sessions are forgotten too).
	left := time.Now()
	if err := mb.Leave(time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "node-b's engine to leave the table", func() bool {
		return fmt.Sprint(replicas(r)) == "[http://127.0.0.1:9000]"
	})
	t.Logf("engine left routing %s after its node left", time.Since(left).Round(time.Millisecond))
	if fmt.Sprint(w.Routable()) != "[http://127.0.0.1:9000]" {
		t.Fatalf("watcher's routable %v", w.Routable())
	}
}

func TestSilentEngineTurnsUnhealthyAfterStaleAfter(t *testing.T) {
	b, r, _ := setup(t, 400*time.Millisecond)
	announce(t, b, "n1", "e1", "http://127.0.0.1:9100", 0)
	waitFor(t, 5*time.Second, "engine routable", func() bool { return len(eligible(r)) == 1 })
	start := time.Now()
	// No more announcements: after StaleAfter (+ one tick) it stops taking
	// traffic but stays in the table (its node is alive).
	waitFor(t, 5*time.Second, "stale engine unhealthy", func() bool { return len(eligible(r)) == 0 })
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Fatalf("engine went unhealthy after %s, before StaleAfter", took)
	}
	if fmt.Sprint(replicas(r)) != "[http://127.0.0.1:9100]" {
		t.Fatalf("stale engine removed instead of marked unhealthy: %v", replicas(r))
	}
}

func TestRejoiningEngineRoutableOnlyAtMinVersion(t *testing.T) {
	b, r, w := setup(t, 3*time.Second)
	const url = "http://127.0.0.1:9200"
	w.MemberJoined("n1", map[string]string{"engine": url})
	announce(t, b, "n1", "e1", url, 2)
	publish(t, b, "", "", messages.MinVersionSet{Header: messages.Header{RunID: run, Version: 2}, MinVersion: 2})
	waitFor(t, 5*time.Second, "engine routable at v2", func() bool { return len(eligible(r)) == 1 })

	w.MemberLeft("n1")
	if len(replicas(r)) != 0 {
		t.Fatalf("dead node's engine still in the table: %v", replicas(r))
	}
	publish(t, b, "", "", messages.MinVersionSet{Header: messages.Header{RunID: run, Version: 4}, MinVersion: 4})
	w.MemberJoined("n1", map[string]string{"engine": url})
	// It comes back healthy but at version 3 < 4: in the table, not eligible.
	announce(t, b, "n1", "e1", url, 3)
	waitFor(t, 5*time.Second, "engine back in the table at v3", func() bool {
		for _, v := range r.Replicas() {
			if v.URL == url && v.Version == 3 {
				return true
			}
		}
		return false
	})
	if len(eligible(r)) != 0 {
		t.Fatalf("engine at v3 eligible with min version 4: %+v", r.Replicas())
	}
	if minV := r.MinVersion(); minV != 4 {
		t.Fatalf("router's min version %d, want 4", minV)
	}
	publish(t, b, "e1", transport.EngineAck, messages.EngineVersionAck{Header: messages.Header{RunID: run, Sender: "n1", Version: 4}, Engine: "e1", URL: url})
	waitFor(t, 5*time.Second, "engine eligible after catching up", func() bool { return len(eligible(r)) == 1 })
}

func TestOtherRunsAndGarbageAreIgnored(t *testing.T) {
	b, r, _ := setup(t, 3*time.Second)
	publish(t, b, "x", transport.EngineHealth, messages.EngineHealth{Header: messages.Header{RunID: "other"}, Engine: "x", URL: "http://127.0.0.1:9300", Healthy: true})
	subj, _ := transport.EngineSubject(run, "y", transport.EngineHealth)
	if err := b.Publish(context.Background(), subj, []byte("not an envelope")); err != nil {
		t.Fatal(err)
	}
	announce(t, b, "n", "z", "http://127.0.0.1:9301", 0) // a marker that arrives after the two above
	waitFor(t, 5*time.Second, "marker engine", func() bool { return len(replicas(r)) > 0 })
	if fmt.Sprint(replicas(r)) != "[http://127.0.0.1:9301]" {
		t.Fatalf("replicas %v: another run's engine or garbage got in", replicas(r))
	}
}

// metaOnly advertises fixed node metadata for a bare memberlist node.
type metaOnly []byte

func (m metaOnly) NodeMeta(int) []byte           { return m }
func (metaOnly) NotifyMsg([]byte)                {}
func (metaOnly) GetBroadcasts(int, int) [][]byte { return nil }
func (metaOnly) LocalState(bool) []byte          { return nil }
func (metaOnly) MergeRemoteState([]byte, bool)   {}

func TestDeadNodesEnginesLeaveRoutingWithinTheBound(t *testing.T) {
	b, r, w := setup(t, time.Minute) // staleness far away: only failure detection can remove it
	ca := cluster.DefaultMembershipConfig("node-a")
	ca.OnJoin = func(m cluster.Member) { w.MemberJoined(m.Name, m.Meta.Endpoints) }
	ca.OnLeave = func(m cluster.Member) { w.MemberLeft(m.Name) }
	ma, err := cluster.JoinCluster(ca, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer ma.Leave(time.Second)
	// node-b is a bare memberlist node with the same probe settings, so the
	// test can kill it without a goodbye (as kill -9 would).
	mc := memberlist.DefaultLANConfig()
	mc.Name, mc.BindAddr, mc.BindPort, mc.AdvertisePort = "node-b", "127.0.0.1", 0, 0
	mc.ProbeInterval, mc.ProbeTimeout, mc.GossipInterval = ca.ProbeInterval, ca.ProbeInterval/2, ca.ProbeInterval/5
	mc.LogOutput = io.Discard
	meta, _ := json.Marshal(cluster.NodeMeta{Roles: []string{"engine"}, Endpoints: map[string]string{"engine": "http://127.0.0.1:9001"}})
	mc.Delegate = metaOnly(meta)
	mb, err := memberlist.Create(mc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mb.Join([]string{ma.Addr()}); err != nil {
		_ = mb.Shutdown()
		t.Fatal(err)
	}
	announce(t, b, "node-b", "eb", "http://127.0.0.1:9001", 0)
	waitFor(t, 5*time.Second, "node-b's engine routable", func() bool {
		return fmt.Sprint(eligible(r)) == "[http://127.0.0.1:9001]"
	})
	killed := time.Now()
	if err := mb.Shutdown(); err != nil { // no Leave: node-a must detect the death
		t.Fatal(err)
	}
	// Bound: probe interval + probe timeout + suspicion timeout
	// (4 × 500ms for a small cluster) ≈ 2.75s; slack for a loaded machine.
	waitFor(t, 6*time.Second, "the dead node's engine to leave the table", func() bool { return len(replicas(r)) == 0 })
	t.Logf("dead node's engine left routing %s after the kill", time.Since(killed).Round(time.Millisecond))
}

// A tiny StaleAfter with the default TickInterval must still give Run a
// positive tick (a zero one made time.NewTicker panic).
func TestDefaultTickIntervalPositive(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := natsbus.Connect(ctx, natsbus.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r, err := proxy.New(proxy.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown(context.Background())
	wc := discovery.DefaultWatcherConfig(run)
	wc.Core.StaleAfter, wc.TickInterval = 3, 0 // 3ns: StaleAfter/4 is 0
	w, err := discovery.NewWatcher(b, r, wc)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	rctx, rcancel := context.WithCancel(context.Background())
	rcancel()
	w.Run(rctx) // returns at once; panicked before
}
