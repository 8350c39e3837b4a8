package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/actors/trainer/bridge"
	"github.com/asyncrl/asyncrl/cluster/localengine"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/internal/wiring"
	"github.com/asyncrl/asyncrl/policy"
	"github.com/asyncrl/asyncrl/tinker/bridgetrain"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// Running is a started server with everything it owns: the NATS bus
// (embedded unless bus.nats_url is set), built-in engines (unless
// tinker.engine_urls is set) and the HTTP listener.
type Running struct {
	// URL is the API root (http://host:port).
	URL     string
	Server  *Server
	Engines []*localengine.Engine
	bus     *natsbus.Bus
	srv     *http.Server
	done    chan error
}

// Options are Start's inputs besides the run config.
type Options struct {
	// Listen overrides tinker.listen.
	Listen string
	// APIKey is required in X-API-Key; mandatory off loopback.
	APIKey string
	Log    zerolog.Logger
	// NATS, when set, is the connection training futures are kept
	// through (a cluster node's bus); Start then connects no bus of its
	// own and leaves the connection open at Close.
	NATS *nats.Conn
	// FutureKeyPrefix and FutureReplicas are Config's (a cluster node
	// prefixes its keys with its name and replicates the bucket as its
	// streams).
	FutureKeyPrefix string
	FutureReplicas  int
	// NoLocalEngines: with tinker.engine_urls empty, start no built-in
	// engines; the caller adds engines with Server.AddEngine (a cluster
	// node's tinker role adds its members' engines).
	NoLocalEngines bool
	// Registry receives the asyncrl_tinker_* metrics (nil: a private one,
	// served at /metrics).
	Registry *prometheus.Registry
}

// ErrAPIKey is returned when a non-loopback listen address has no API key.
var ErrAPIKey = errors.New("tinker: listening beyond loopback needs an API key (--api-key or ASYNCRL_TINKER_API_KEY)")

// Start wires and starts `asyncrl tinker serve`.
func Start(ctx context.Context, c config.Config, o Options) (*Running, error) {
	t := c.Tinker
	if o.Listen != "" {
		t.Listen = o.Listen
	}
	host, _, err := net.SplitHostPort(t.Listen)
	if err != nil {
		return nil, fmt.Errorf("tinker: listen %q: %w", t.Listen, err)
	}
	if ip := net.ParseIP(host); (ip == nil || !ip.IsLoopback()) && host != "localhost" && o.APIKey == "" {
		return nil, fmt.Errorf("%w: listen %s", ErrAPIKey, t.Listen)
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	dataDir := t.DataDir
	if dataDir == "" {
		dataDir = filepath.Join(c.Run.DataDir, "tinker")
	}
	base := t.BaseModel
	if base == "" {
		base = c.Engines.ServedModelName
	}
	engineKey, err := wiring.ReadSecret("engines.api_key_file", c.Engines.APIKeyFile)
	if err != nil {
		return nil, fmt.Errorf("tinker: %w", err)
	}
	// the base model: a Hugging Face checkpoint of tinker.base_models, or
	// the built-in policy
	var serve engine.Model
	var pm *policy.Model
	hf, err := resolveHFBase(c, t, dataDir)
	if err != nil {
		return nil, fmt.Errorf("tinker: base model: %w", err)
	}
	if hf != nil && o.NoLocalEngines && len(t.EngineURLs) == 0 {
		return nil, fmt.Errorf("tinker: base model %s: a Hugging Face base model on a cluster node's tinker role is not supported yet (the members' engines serve the run's model, not %s): run `asyncrl tinker serve` on its own, or list engines serving it in tinker.engine_urls", hf.entry.Name, hf.dir)
	}
	if hf != nil {
		base, serve = hf.entry.Name, hf.model
		if hf.created {
			o.Log.Info().Str("dir", hf.dir).Str("arch", string(hf.entry.Arch)).Int64("seed", c.Run.Seed).Msg("tinker: base model random-initialised")
		}
	} else {
		em, err := wiring.InitialPolicy(t.BaseWeights, uint64(c.Run.Seed))
		if err != nil {
			return nil, fmt.Errorf("tinker: base model: %w", err)
		}
		var ok bool
		if pm, ok = em.(*policy.Model); !ok {
			return nil, fmt.Errorf("tinker: base_weights %s is a Hugging Face checkpoint, not the built-in policy: list it under tinker.base_models ({name, path}) and drop base_weights (docs/tinker.md \"Base models\")", t.BaseWeights)
		}
		serve = pm.Clone()
	}
	r := &Running{done: make(chan error, 1)}
	ok := false
	defer func() {
		if !ok {
			r.Close()
		}
	}()
	nc := o.NATS
	if nc == nil {
		bopts := natsbus.DefaultOptions()
		bopts.URL, bopts.Logger, bopts.MaxPayload = c.Bus.NATSURL, o.Log, c.Bus.MaxPayloadBytes
		bopts.StoreDir = c.Bus.JetStreamDir
		if bopts.StoreDir == "" && bopts.URL == "" {
			bopts.StoreDir = filepath.Join(dataDir, "jetstream")
		}
		if r.bus, err = natsbus.Connect(ctx, bopts); err != nil {
			return nil, fmt.Errorf("tinker: bus: %w", err)
		}
		nc = r.bus.Conn()
	}
	urls := t.EngineURLs
	if len(urls) == 0 && !o.NoLocalEngines {
		ec := c.Engines
		ec.ServedModelName = base
		if r.Engines, err = localengine.Start(ec, serve, c.Run.Seed, o.Log, nil); err != nil {
			return nil, err
		}
		for _, e := range r.Engines {
			urls = append(urls, e.URL)
		}
	}
	var backend Backend
	if hf != nil {
		backend = hfExecBackend(t, hf, dataDir, o.Log)
	} else if backend, err = trainBackend(t, pm, dataDir, o.Log); err != nil {
		return nil, err
	}
	if r.Server, err = New(ctx, Config{Tinker: t, BaseModel: base, Backend: backend, EngineURLs: urls,
		DataDir: dataDir, NATS: nc, APIKey: o.APIKey, EngineAPIKey: engineKey, Log: o.Log, FutureKeyPrefix: o.FutureKeyPrefix,
		FutureReplicas: o.FutureReplicas, Registry: o.Registry}); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", t.Listen)
	if err != nil {
		return nil, fmt.Errorf("tinker: listen %s: %w", t.Listen, err)
	}
	r.URL = "http://" + ln.Addr().String()
	r.srv = &http.Server{Handler: r.Server.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { r.done <- r.srv.Serve(ln) }()
	ok = true
	o.Log.Info().Str("url", r.URL).Str("base_model", base).Strs("engines", urls).Str("data_dir", dataDir).Msg("tinker API serving")
	return r, nil
}

// Done is closed with the HTTP server's error when it stops by itself.
func (r *Running) Done() <-chan error { return r.done }

// Close stops the listener, the server, the engines and the bus.
func (r *Running) Close() {
	if r.srv != nil {
		// Long polls end when the server closes; give them a second.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = r.srv.Shutdown(ctx)
		cancel()
	}
	if r.Server != nil {
		r.Server.Close()
	}
	if r.srv != nil {
		_ = r.srv.Close()
	}
	localengine.StopAll(r.Engines)
	if r.bus != nil {
		_ = r.bus.Close()
	}
}

// trainBackend is tinker.trainer's backend: builtin trains pm in process;
// exec writes pm as the base serving checkpoint (<data_dir>/exec/base) every
// model's child starts from.
func trainBackend(t config.TinkerConfig, pm *policy.Model, dataDir string, log zerolog.Logger) (Backend, error) {
	if t.Trainer != config.TinkerTrainerExec {
		return GoBackend(pm), nil
	}
	dir := filepath.Join(dataDir, "exec")
	baseDir := filepath.Join(dir, "base")
	if err := os.RemoveAll(baseDir); err != nil {
		return nil, fmt.Errorf("tinker: exec backend: %w", err)
	}
	if err := pm.SaveServing(baseDir); err != nil {
		return nil, fmt.Errorf("tinker: exec backend: base checkpoint: %w", err)
	}
	cfg, err := bridgetrain.ReadConfig(baseDir)
	if err != nil {
		return nil, fmt.Errorf("tinker: exec backend: %w", err)
	}
	return ExecBackend(&bridgetrain.Backend{
		Opts: bridgetrain.Options{Spec: bridge.Spec{Argv: t.TrainerExec, Env: t.TrainerExecEnv}, Base: baseDir, Config: cfg,
			OutDir: filepath.Join(dir, "models"), Timeout: t.TrainerExecTimeout, Logger: log.With().Str("component", "tinker-trainer").Logger()},
		Vocab: pm.VocabSize(), MaxLen: pm.MaxSeqLen(), ArchName: "asyncrl-policy", Tokenizer: "asyncrl/char-ascii",
	}), nil
}
