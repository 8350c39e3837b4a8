package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/actors/publisher"
	"github.com/asyncrl/asyncrl/cluster/weightsync"
	"github.com/asyncrl/asyncrl/config"
)

// TestDataPlaneSync runs the loop with publisher.transport dataplane: every
// step completes, both engines end at the final version (acked, so the
// router's minimum got there too), nothing is lost, and no store was
// written.
func TestDataPlaneSync(t *testing.T) {
	cfg := smallConfig(t, 4)
	cfg.Publisher.Transport = config.TransportDataPlane
	n, s := runNode(t, cfg, nil)
	if s.Steps != 4 || s.FinalVersion != 4 || s.TrajectoriesLost != 0 {
		t.Fatalf("steps %d final %d lost %d", s.Steps, s.FinalVersion, s.TrajectoriesLost)
	}
	for i, v := range s.EngineVersions {
		if v != 4 {
			t.Errorf("engine %d at version %d, want 4", i, v)
		}
	}
	// The minimum trails the final version by the staleness budget.
	if m, want := n.routerMin(), 4-cfg.MaxVersionLag(); m != want {
		t.Errorf("router minimum %d, want %d", m, want)
	}
	checkLedger(t, n, s)
	if _, err := os.Stat(weightsync.LayoutFor(cfg).SyncDir); !os.IsNotExist(err) {
		t.Errorf("dataplane transport wrote a sync dir: %v", err)
	}
	if b := counterValue(t, n, "asyncrl_publisher_dataplane_bytes_total"); b <= 0 {
		t.Errorf("data plane bytes %v", b)
	}
	if r := counterValue(t, n, "asyncrl_publisher_dataplane_refused_total"); r != 0 {
		t.Errorf("%v fetches refused in a clean run", r)
	}
}

// TestDataPlaneRefusesCorruptRange: version 2's bytes change after their
// checksums were taken; every engine's agent refuses them, so no engine
// loads or serves version 2, each stays at version 1, and the trainer's
// publish of version 2 fails as for any version no engine can load
// (publisher.ErrNoEngine), instead of serving damaged weights — on each
// of its publisher.attempts tries (a retry dispatches the version to the
// engines again, and they refuse it again).
func TestDataPlaneRefusesCorruptRange(t *testing.T) {
	cfg := smallConfig(t, 2)
	cfg.Publisher.Transport = config.TransportDataPlane
	cfg.Publisher.Attempts, cfg.Publisher.RetryBackoff = 2, 50*time.Millisecond
	n, err := New(cfg, Options{InMemoryBus: true})
	if err != nil {
		t.Fatal(err)
	}
	n.hooks.corrupt = func(v int64, b []byte) {
		if v == 2 {
			b[len(b)/2] ^= 0xff
		}
	}
	var mu sync.Mutex
	var applied []int64
	n.hooks.beforeApply = func(_ int, v int64) {
		mu.Lock()
		applied = append(applied, v)
		mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = n.Wait(ctx)
	n.Stop()
	if !errors.Is(err, publisher.ErrNoEngine) {
		t.Fatalf("wait: %v, want the publish of version 2 refused (publisher.ErrNoEngine)", err)
	}
	s := n.Summary(false, nil)
	for i, v := range s.EngineVersions {
		if v != 1 {
			t.Errorf("engine %d at version %d; the corrupt version 2 must not be served", i, v)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if slices.Contains(applied, 2) {
		t.Errorf("version 2 passed the fetch: %v", applied)
	}
	if r := counterValue(t, n, "asyncrl_publisher_dataplane_refused_total"); r < float64(2*cfg.Engines.Count) {
		t.Errorf("%v fetches refused, want at least one per engine (%d) on each of the 2 tries", r, cfg.Engines.Count)
	}
}

// TestPublishCostDataPlane measures the trainer's publish time per step
// (from the new weights to the version being routable) on the default
// run, side by side: deltas through the local store, the full checkpoint
// over the TCP data plane, and the in-memory swap (mode full). A
// measurement, not a speed assertion: it checks only that every run
// finishes. ASYNCRL_LONG=1 go test -run TestPublishCostDataPlane -v.
func TestPublishCostDataPlane(t *testing.T) {
	if os.Getenv("ASYNCRL_LONG") == "" {
		t.Skip("set ASYNCRL_LONG=1 to measure the publish cost per transport on the default run")
	}
	rounds := 3
	type variant struct {
		name      string
		mode      config.PublishMode
		transport config.PublishTransport
	}
	variants := []variant{{"delta/store", config.PublishDelta, config.TransportStore},
		{"full/dataplane", config.PublishDelta, config.TransportDataPlane},
		{"full/in-memory", config.PublishFull, config.TransportStore}}
	for r := range rounds {
		for _, v := range variants {
			cfg := config.Default()
			cfg.Run.Steps, cfg.Run.Seed = 30, 1
			cfg.Run.DataDir = t.TempDir()
			cfg.Run.ReportDir = t.TempDir()
			cfg.Publisher.Mode, cfg.Publisher.Transport = v.mode, v.transport
			n, s := runNode(t, cfg, nil)
			var pubs []time.Duration
			for _, st := range n.steps() {
				pubs = append(pubs, st.PublishTime)
			}
			slices.Sort(pubs)
			var sum time.Duration
			for _, p := range pubs {
				sum += p
			}
			k := time.Duration(max(len(pubs), 1))
			prep := ""
			if n.wsync != nil {
				prep = fmt.Sprintf(", write+encode/offer %v/step", n.wsync.EncodeTime()/k)
			}
			t.Logf("round %d %-15s publish median %v mean %v%s, wall %.1fs, reward first5 %.3f last5 %.3f, engines %v",
				r, v.name, pubs[len(pubs)/2], sum/k, prep, s.WallSeconds, s.RewardFirst5, s.RewardLast5, s.EngineVersions)
			if s.Steps != 30 {
				t.Fatalf("%s: %d steps", v.name, s.Steps)
			}
		}
	}
}

// counterValue is the value of the counter name in n's registry (0 when
// it is not there).
func counterValue(t *testing.T, n *Node, name string) float64 {
	t.Helper()
	mfs, err := n.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var v float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				v += m.GetCounter().GetValue()
			}
		}
	}
	return v
}
