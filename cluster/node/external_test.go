package node

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/cluster/internal/clustertest"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/engine/driver"
	"github.com/asyncrl/asyncrl/internal/report"
	"github.com/asyncrl/asyncrl/wiring"
)

// externalEngine is an engine started outside the run, as `asyncrl
// engine` starts one: its own weights (another seed), its own HTTP server.
// completions counts the generation requests it answered.
type externalEngine struct {
	url         string
	completions atomic.Int64
}

// startExternalEngine serves a built-in engine on loopback the way
// `asyncrl engine --seed seed` does, until the test ends.
func startExternalEngine(t *testing.T, cfg config.Config, seed int64) *externalEngine {
	t.Helper()
	m, err := wiring.InitialPolicy("", uint64(seed))
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(wiring.EngineConfig(cfg.Engines, cfg.Engines.ServedModelName, uint64(seed)), m, engine.WithLoader(wiring.LoadPolicy))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	x := &externalEngine{url: "http://" + ln.Addr().String()}
	h := e.Handler()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/completions" {
			x.completions.Add(1)
		}
		h.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = e.Shutdown(ctx)
		_ = srv.Shutdown(ctx)
	})
	return x
}

// TestExternalEngines runs the loop with engines.count 0 on three engines
// it did not start, driven only over their HTTP API, in each pause mode:
// every engine first loads the run's version 0 (it started on other
// weights), every version is acknowledged by every engine after a load
// over HTTP (two apply deltas in place, one loads full checkpoints), each
// engine serves the final version, every engine answered rollouts, and no
// trajectory is lost.
func TestExternalEngines(t *testing.T) {
	for _, mode := range config.PauseMode("").Values() {
		t.Run(mode, func(t *testing.T) {
			cfg := smallConfig(t, 4)
			cfg.Trainer.PauseMode = config.PauseMode(mode)
			cfg.Engines.Count = 0
			var es []*externalEngine
			for i, load := range []config.WeightLoad{config.LoadDelta, config.LoadFull, config.LoadDelta} {
				x := startExternalEngine(t, cfg, 100+int64(i))
				es = append(es, x)
				cfg.Engines.External = append(cfg.Engines.External, config.ExternalEngine{URL: x.url, Kind: config.EngineBuiltin, WeightLoad: load})
			}
			n, s, acks := runNodeAcks(t, cfg)
			checkLedger(t, n, s)
			if s.Steps != 4 || s.TrajectoriesLost != 0 {
				t.Fatalf("steps %d lost %d, want 4 and 0", s.Steps, s.TrajectoriesLost)
			}
			if len(n.engines) != 0 {
				t.Fatalf("the node started %d engines with engines.count 0", len(n.engines))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for i, x := range es {
				name := n.driven[i].Name
				for v := int64(1); v <= 4; v++ {
					if !acks.Acked(cfg.Run.ID, name, v) {
						t.Errorf("%s: version %d never acknowledged", name, v)
					}
				}
				d, err := driver.New(driver.KindBuiltin, x.url, driver.Options{})
				if err != nil {
					t.Fatal(err)
				}
				if v, err := d.ServedVersion(ctx); err != nil || v != 4 {
					t.Errorf("%s serves version %d (%v), want 4", name, v, err)
				}
				if x.completions.Load() == 0 {
					t.Errorf("%s answered no rollout", name)
				}
			}
		})
	}
}

// TestExternalOnlyURLAndKind: a config file whose only content is
// engines.external: [{url, kind}] runs — no built-in engines start (count
// defaults to 0 beside external engines), the vLLM-kind engine takes
// deltas (its kind's default weight load), it loads every version over
// HTTP, answers every rollout and ends on the final version. The engine
// is a built-in one on its own HTTP server, driven as a vLLM.
func TestExternalOnlyURLAndKind(t *testing.T) {
	small := smallConfig(t, 3)
	x := startExternalEngine(t, small, 11)
	path := filepath.Join(t.TempDir(), "run.yaml")
	if err := os.WriteFile(path, []byte("engines:\n  external:\n    - {url: \""+x.url+"\", kind: vllm}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// What `asyncrl run --config run.yaml --steps 3` would add, plus the
	// test's short task and private directories.
	cfg, err := config.LoadWith(path, func(c *config.Config) {
		c.Run = small.Run
		c.Rollout, c.Router = small.Rollout, small.Router
		c.Trainer.MiniBatchSize, c.Trainer.NumParallelGenerationWorkers, c.Trainer.MaxStalenessSteps =
			small.Trainer.MiniBatchSize, small.Trainer.NumParallelGenerationWorkers, small.Trainer.MaxStalenessSteps
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Engines.Count != 0 || cfg.Engines.External[0].WeightLoad != config.LoadDelta {
		t.Fatalf("engines.count %d, weight_load %q; want 0 and delta", cfg.Engines.Count, cfg.Engines.External[0].WeightLoad)
	}
	n, s, acks := runNodeAcks(t, cfg)
	checkLedger(t, n, s)
	if s.Steps != 3 || s.TrajectoriesLost != 0 || len(n.engines) != 0 || len(n.driven) != 1 {
		t.Fatalf("steps %d lost %d, %d engines started, %d driven; want 3, 0, 0, 1", s.Steps, s.TrajectoriesLost, len(n.engines), len(n.driven))
	}
	if d := n.driven[0]; d.Load != config.LoadDelta {
		t.Fatalf("%s loads %s, want delta", d.Name, d.Load)
	}
	for v := int64(1); v <= 3; v++ {
		if !acks.Acked(cfg.Run.ID, n.driven[0].Name, v) {
			t.Errorf("version %d never acknowledged", v)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := driver.New(driver.KindVLLM, x.url, driver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := d.ServedVersion(ctx); err != nil || v != 3 {
		t.Errorf("the engine serves version %d (%v), want 3", v, err)
	}
	if x.completions.Load() == 0 {
		t.Error("the engine answered no rollout")
	}
}

// runNodeAcks is runNode recording every EngineVersionAck of the run.
func runNodeAcks(t *testing.T, cfg config.Config) (*Node, report.Summary, *clustertest.AckLog) {
	t.Helper()
	acks := &clustertest.AckLog{}
	n, s := runNode(t, cfg, func(n *Node) {
		sub, err := n.Bus().Subscribe(n.subj.AcksAll, acks.On)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	})
	return n, s, acks
}

// TestExternalEngineMissingRoute: an external engine without a route the
// run needs fails the start, naming the engine and the fix, before
// anything is routed to it.
func TestExternalEngineMissingRoute(t *testing.T) {
	cfg := smallConfig(t, 1)
	cfg.Engines.Count = 0
	x := startExternalEngine(t, cfg, 7)
	// A vLLM without VLLM_SERVER_DEV_MODE: the RL routes answer 404.
	mux := http.NewServeMux()
	mux.HandleFunc("GET /is_paused", http.NotFound)
	mux.Handle("/", proxyTo(t, x.url))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := "http://" + ln.Addr().String()
	cfg.Engines.External = []config.ExternalEngine{{URL: addr, Kind: config.EngineVLLM, WeightLoad: config.LoadDelta}}
	n, err := New(cfg, Options{InMemoryBus: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = n.Start(ctx)
	if err == nil {
		n.Stop()
		t.Fatal("the run started on an engine without /is_paused")
	}
	for _, want := range []string{"engines.external[0]", addr, "/is_paused", "VLLM_SERVER_DEV_MODE=1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

// TestExternalEngineOtherModelName: an engine serving another model name
// than engines.served_model_name fails the start with both fixes, the
// config line to write first.
func TestExternalEngineOtherModelName(t *testing.T) {
	cfg := smallConfig(t, 1)
	x := startExternalEngine(t, cfg, 7) // serves "asyncrl-policy"
	cfg.Engines.Count, cfg.Engines.ServedModelName = 0, "policy"
	cfg.Engines.External = []config.ExternalEngine{{URL: x.url, Kind: config.EngineVLLM}}
	n, err := New(cfg, Options{InMemoryBus: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err = n.Start(ctx); err == nil {
		n.Stop()
		t.Fatal("the run started on an engine serving another model name")
	}
	for _, want := range []string{"engines.external[0]", x.url, "set engines.served_model_name: asyncrl-policy", "--served-model-name policy"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

// proxyTo forwards every request to base.
func proxyTo(t *testing.T, base string) http.Handler {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	return httputil.NewSingleHostReverseProxy(u)
}

// TestCheckExternal: the run refuses, before it starts anything, external
// engines it could not drive, naming the setting to change.
func TestCheckExternal(t *testing.T) {
	ext := func(k config.EngineKind, l config.WeightLoad) []config.ExternalEngine {
		return []config.ExternalEngine{{URL: "http://127.0.0.1:9", Kind: k, WeightLoad: l}}
	}
	cases := []struct {
		name   string
		mod    func(*config.Config)
		remote bool
		want   string // "" = accepted
	}{
		{"vllm delta", func(c *config.Config) { c.Engines.External = ext(config.EngineVLLM, config.LoadDelta) }, false, ""},
		{"sglang full keep", func(c *config.Config) {
			c.Engines.External, c.Trainer.PauseMode = ext(config.EngineSGLang, config.LoadFull), config.PauseKeep
		}, false, ""},
		{"sglang wait", func(c *config.Config) {
			c.Engines.External, c.Trainer.PauseMode = ext(config.EngineSGLang, config.LoadFull), config.PauseWait
		}, false, "no wait mode"},
		{"lora", func(c *config.Config) { c.Engines.External = ext(config.EngineVLLM, config.LoadLoRA) }, false, "weight_load: lora"},
		{"mode full", func(c *config.Config) {
			c.Engines.External, c.Publisher.Mode = ext(config.EngineVLLM, config.LoadDelta), config.PublishFull
		}, false, "publisher.mode delta"},
		{"data plane", func(c *config.Config) {
			c.Engines.External, c.Publisher.Transport = ext(config.EngineVLLM, config.LoadDelta), config.TransportDataPlane
		}, false, "publisher.transport store"},
		{"cluster", func(c *config.Config) { c.Engines.External = ext(config.EngineVLLM, config.LoadDelta) }, true, "engine role"},
		{"tokenizer with the built-in trainer", func(c *config.Config) {
			c.Engines.External = ext(config.EngineVLLM, config.LoadDelta)
			c.Engines.External[0].Tokenizer = "/m/tokenizer.json"
		}, false, "trainer.backend exec or remote"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := config.Default()
			tc.mod(&c)
			err := checkExternal(c, tc.remote)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v, want one saying %q", err, tc.want)
			}
		})
	}
}
