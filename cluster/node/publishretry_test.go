package node

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/actors/publisher"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/engine/driver"
	pmodel "github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/transport/natsbus"
	"github.com/asyncrl/asyncrl/wiring"
)

// refusingEngine fronts an engine with a proxy that answers the first
// asyncrl_load_checkpoint of version refuse with a 500, as an engine
// briefly unreachable or out of memory would, and passes everything else
// through; refused counts the refusals.
type refusingEngine struct {
	url     string
	refused atomic.Int64
}

func startRefusingEngine(t *testing.T, backend string, refuse int64) *refusingEngine {
	t.Helper()
	return startRefusingEngineN(t, backend, refuse, 1)
}

// startRefusingEngineN is startRefusingEngine refusing the first times
// loads of version refuse (every load: a negative times).
func startRefusingEngineN(t *testing.T, backend string, refuse, times int64) *refusingEngine {
	t.Helper()
	x := &refusingEngine{}
	proxy := proxyTo(t, backend)
	var tries atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/collective_rpc" {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			if rpcLoadsVersion(body, refuse) && (times < 0 || tries.Add(1) <= times) {
				x.refused.Add(1)
				http.Error(w, "engine briefly unavailable", http.StatusInternalServerError)
				return
			}
		}
		proxy.ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	x.url = "http://" + ln.Addr().String()
	return x
}

// rpcLoadsVersion reports whether a /collective_rpc body is
// asyncrl_load_checkpoint of version v (its second argument, a number or
// a string, as the engine reads it).
func rpcLoadsVersion(body []byte, v int64) bool {
	var req engine.CollectiveRPCRequest
	if json.Unmarshal(body, &req) != nil || req.Method == nil || *req.Method != engine.RPCLoadCheckpoint || len(req.Args) < 2 {
		return false
	}
	var n int64
	if json.Unmarshal(req.Args[1], &n) == nil {
		return n == v
	}
	var s string
	if json.Unmarshal(req.Args[1], &s) != nil {
		return false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return err == nil && n == v
}

// TestRunSurvivesAnEngineRefusingAVersion: the run's only engine refuses
// version 2 once (over its HTTP API), so every engine failed it and the
// trainer's publish fails with no engine serving it. The run does not
// end: the trainer publishes the same weights again after
// publisher.retry_backoff, the publisher dispatches the version again to
// the engine that failed it, the engine loads it, and the run finishes
// every step with nothing lost and the engine on the final version.
func TestRunSurvivesAnEngineRefusingAVersion(t *testing.T) {
	cfg := smallConfig(t, 4)
	cfg.Engines.Count = 0
	cfg.Publisher.RetryBackoff = 50 * time.Millisecond
	backend := startExternalEngine(t, cfg, 100)
	x := startRefusingEngine(t, backend.url, 2)
	cfg.Engines.External = []config.ExternalEngine{{URL: x.url, Kind: config.EngineBuiltin, WeightLoad: config.LoadFull}}
	n, s, acks := runNodeAcks(t, cfg)
	checkLedger(t, n, s)
	if got := x.refused.Load(); got != 1 {
		t.Fatalf("the engine refused %d loads of version 2, want 1 (the test's fault did not strike)", got)
	}
	if s.Steps != 4 || s.FinalVersion != 4 || s.TrajectoriesLost != 0 {
		t.Fatalf("steps %d final version %d lost %d, want 4, 4, 0", s.Steps, s.FinalVersion, s.TrajectoriesLost)
	}
	name := n.driven[0].Name
	for v := int64(1); v <= 4; v++ {
		if !acks.Acked(cfg.Run.ID, name, v) {
			t.Errorf("version %d never acknowledged by %s", v, name)
		}
	}
	d, err := driver.New(driver.KindBuiltin, backend.url, driver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if v, err := d.ServedVersion(ctx); err != nil || v != 4 {
		t.Errorf("the engine serves version %d (%v), want 4", v, err)
	}
}

// startRemoteRun starts a run of cfg with a remote trainer whose only
// engine refuses version 1's load refusals times (-1: always), and the
// worker's side over its own connection to the run's bus: its
// BusPublisher (the caller sets the timing) and the model it publishes.
// Everything stops with the test.
func startRemoteRun(t *testing.T, cfg config.Config, refusals int64) (context.Context, *externalEngine, *refusingEngine,
	*publisher.BusPublisher, *pmodel.Model) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel) // last: after the node and the bus stopped
	cfg.Engines.Count = 0
	cfg.Trainer.Backend = config.BackendRemote
	backend := startExternalEngine(t, cfg, 100)
	x := startRefusingEngineN(t, backend.url, 1, refusals)
	cfg.Engines.External = []config.ExternalEngine{{URL: x.url, Kind: config.EngineBuiltin, WeightLoad: config.LoadFull}}
	n, err := New(cfg, Options{InMemoryBus: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	bopts := natsbus.DefaultOptions()
	bopts.URL, bopts.Name = n.BusURL(), "worker"
	bus, err := natsbus.Connect(ctx, bopts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bus.Close() })
	m, err := pmodel.New(wiring.PolicyModel(cfg), uint64(cfg.Run.Seed))
	if err != nil {
		t.Fatal(err)
	}
	return ctx, backend, x, &publisher.BusPublisher{Bus: bus, RunID: cfg.Run.ID, Sender: "worker", Dir: t.TempDir(),
		Weights: n.subj.Weights, Acks: n.subj.AcksAll}, m
}

// TestRemoteWorkerHearsARetriedVersion: a remote trainer worker's version
// that every engine failed (the only engine refuses its load once) is
// published again on the worker's first repeated announcement after
// publisher.retry_backoff, so the engine, back, loads it and its ack
// reaches the worker within that backoff — not after the worker's whole ack timeout (60 s by default;
// 20 s here, a bound the fix beats by far, and which the holder that
// only re-acked a served version ran out every time).
func TestRemoteWorkerHearsARetriedVersion(t *testing.T) {
	cfg := smallConfig(t, 3)
	ctx, backend, x, pub, m := startRemoteRun(t, cfg, 1)
	const ackTimeout = 20 * time.Second
	pub.AckTimeout, pub.Resend = ackTimeout, 200*time.Millisecond
	t0 := time.Now()
	if err := pub.Publish(ctx, publisher.InMemory(m), 1); err != nil {
		t.Fatalf("publish of version 1, refused once by the only engine: %v", err)
	}
	if got := x.refused.Load(); got != 1 {
		t.Fatalf("the engine refused %d loads of version 1, want 1 (the test's fault did not strike)", got)
	}
	t.Logf("version 1 acknowledged %v after the first announcement", time.Since(t0).Round(time.Millisecond))
	d, err := driver.New(driver.KindBuiltin, backend.url, driver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := d.ServedVersion(ctx); err != nil || v != 1 {
		t.Errorf("the engine serves version %d (%v), want 1", v, err)
	}
}

// TestRemoteWorkerRetriesAreSpaced: an engine that keeps refusing a
// remote worker's version (a corrupt range, an engine out of memory on
// load) is not told to load it on every repeat of the worker's
// announcement: the node's retries of the version are spaced by
// publisher.retry_backoff, doubling. Here the worker repeats every 50 ms
// for 3 s (about 60 repeats) and the backoff is 400 ms, so the tries are
// the publish and the retries at about 0.4, 1.2 and 2.8 s: 4, and a few
// more if the machine is slow to answer; before the node spaced them it
// retried on every repeat (about 60 loads).
func TestRemoteWorkerRetriesAreSpaced(t *testing.T) {
	cfg := smallConfig(t, 3)
	cfg.Publisher.RetryBackoff = 400 * time.Millisecond
	ctx, _, x, pub, m := startRemoteRun(t, cfg, -1)
	pub.AckTimeout, pub.Resend = 3*time.Second, 50*time.Millisecond
	if err := pub.Publish(ctx, publisher.InMemory(m), 1); err == nil {
		t.Fatal("version 1 acknowledged, though its only engine refuses every load of it")
	}
	// Repeats still queued when the worker gave up reach the node after
	// it: the node handles announcements in order, so once version 2
	// (not refused) is acknowledged every repeat of version 1 was
	// handled.
	if err := pub.Publish(ctx, publisher.InMemory(m), 2); err != nil {
		t.Fatalf("version 2: %v", err)
	}
	got := x.refused.Load()
	if got < 2 {
		t.Fatalf("the engine was told to load version 1 %d times, want at least 2 (the publish and a retry)", got)
	}
	if got > 8 {
		t.Fatalf("the engine was told to load version 1 %d times in 3 s of repeats 50 ms apart, want at most 8 (retries spaced by publisher.retry_backoff 400 ms, doubling)", got)
	}
	t.Logf("version 1 loaded %d times", got)
}
