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

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/asyncrl/asyncrl/actors/publisher/shell"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/internal/wiring"
	pol "github.com/asyncrl/asyncrl/policy"
	"github.com/asyncrl/asyncrl/transport/dataplane"
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
	if m, want := n.routerMin(), 4-wiring.MaxVersionLag(cfg); m != want {
		t.Errorf("router minimum %d, want %d", m, want)
	}
	checkLedger(t, n, s)
	if _, err := os.Stat(layoutFor(cfg).syncDir); !os.IsNotExist(err) {
		t.Errorf("dataplane transport wrote a sync dir: %v", err)
	}
	if b := testutil.ToFloat64(n.wsync.dp.bytes); b <= 0 {
		t.Errorf("data plane bytes %v", b)
	}
	if r := testutil.ToFloat64(n.wsync.dp.refused); r != 0 {
		t.Errorf("%v fetches refused in a clean run", r)
	}
}

// TestDataPlaneRefusesCorruptRange: version 2's bytes change after their
// checksums were taken; every engine's agent refuses them, so no engine
// loads or serves version 2, each stays at version 1, and the trainer's
// publish of version 2 fails as for any version no engine can load
// (shell.ErrNoEngine), instead of serving damaged weights.
func TestDataPlaneRefusesCorruptRange(t *testing.T) {
	dpCorruptHook = func(v int64, b []byte) {
		if v == 2 {
			b[len(b)/2] ^= 0xff
		}
	}
	defer func() { dpCorruptHook = nil }()
	cfg := smallConfig(t, 2)
	cfg.Publisher.Transport = config.TransportDataPlane
	n, err := New(cfg, Options{InMemoryBus: true})
	if err != nil {
		t.Fatal(err)
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
	if !errors.Is(err, shell.ErrNoEngine) {
		t.Fatalf("wait: %v, want the publish of version 2 refused (shell.ErrNoEngine)", err)
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
	if r := testutil.ToFloat64(n.wsync.dp.refused); r < float64(cfg.Engines.Count) {
		t.Errorf("%v fetches refused, want at least one per engine (%d)", r, cfg.Engines.Count)
	}
}

// TestDataPlaneFetchVerifies: the fetch side alone — a clean version loads
// to the published weights, a corrupted one fails with ErrChecksum, a
// withdrawn one with ErrUnknownTransfer.
func TestDataPlaneFetchVerifies(t *testing.T) {
	m, err := pol.New(pol.DefaultConfig(), 7)
	if err != nil {
		t.Fatal(err)
	}
	d, err := newDPPush("t", m.Config(), []string{"engine-0"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	d.corrupt = func(v int64, b []byte) {
		if v == 2 {
			b[len(b)-1] ^= 1
		}
	}
	ctx := context.Background()
	for v := int64(1); v <= 2; v++ {
		dir := t.TempDir()
		if err := m.SaveServing(dir); err != nil {
			t.Fatal(err)
		}
		if _, err := d.publishDir(ctx, dir, v); err != nil {
			t.Fatal(err)
		}
	}
	got, err := d.fetch(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := m.Clone()
	want.RoundBF16()
	probe := []int32{1, 2, 3}
	a, b := make([]float32, got.VocabSize()), make([]float32, want.VocabSize())
	got.NextLogits(probe, a)
	want.NextLogits(probe, b)
	if !slices.Equal(a, b) {
		t.Error("version 1 fetched from the data plane differs from the published weights")
	}
	if _, err := d.fetch(ctx, 2); !errors.Is(err, dataplane.ErrChecksum) {
		t.Errorf("corrupt version 2: %v, want ErrChecksum", err)
	}
	for v := int64(3); v <= 4; v++ { // versions 1 and 2 drop out of the offer window
		dir := t.TempDir()
		if err := m.SaveServing(dir); err != nil {
			t.Fatal(err)
		}
		if _, err := d.publishDir(ctx, dir, v); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.fetch(ctx, 1); !errors.Is(err, dataplane.ErrUnknownTransfer) {
		t.Errorf("withdrawn version 1: %v, want ErrUnknownTransfer", err)
	}
	if r := testutil.ToFloat64(d.refused); r != 2 {
		t.Errorf("refused %v, want 2", r)
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
				prep = fmt.Sprintf(", write+encode/offer %v/step", n.wsync.encodeDur/k)
			}
			t.Logf("round %d %-15s publish median %v mean %v%s, wall %.1fs, reward first5 %.3f last5 %.3f, engines %v",
				r, v.name, pubs[len(pubs)/2], sum/k, prep, s.WallSeconds, s.RewardFirst5, s.RewardLast5, s.EngineVersions)
			if s.Steps != 30 {
				t.Fatalf("%s: %d steps", v.name, s.Steps)
			}
		}
	}
}
