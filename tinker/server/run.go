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
	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/tinker/bridgetrain"
	"github.com/asyncrl/asyncrl/transport/natsbus"
	"github.com/asyncrl/asyncrl/wiring"
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
	if err := checkListen(t.Listen, o.APIKey); err != nil {
		return nil, err
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	dataDir := t.DataDir
	if dataDir == "" {
		dataDir = filepath.Join(c.Run.DataDir, "tinker")
	}
	engineKey, err := wiring.ReadSecret("engines.api_key_file", c.Engines.APIKeyFile)
	if err != nil {
		return nil, fmt.Errorf("tinker: %w", err)
	}
	bm, err := resolveBase(c, t, dataDir, o)
	if err != nil {
		return nil, err
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
		if nc, err = r.connectBus(ctx, c, dataDir, o.Log); err != nil {
			return nil, err
		}
	}
	urls, err := r.startEngines(c, t.EngineURLs, o.NoLocalEngines, bm, o.Log)
	if err != nil {
		return nil, err
	}
	backend, err := bm.backend(t, dataDir, o.Log)
	if err != nil {
		return nil, err
	}
	if r.Server, err = New(ctx, Config{Tinker: t, BaseModel: bm.name, Backend: backend, EngineURLs: urls,
		DataDir: dataDir, NATS: nc, APIKey: o.APIKey, EngineAPIKey: engineKey, Log: o.Log, FutureKeyPrefix: o.FutureKeyPrefix,
		FutureReplicas: o.FutureReplicas, Registry: o.Registry}); err != nil {
		return nil, err
	}
	if err := r.serve(t.Listen); err != nil {
		return nil, err
	}
	ok = true
	o.Log.Info().Str("url", r.URL).Str("base_model", bm.name).Strs("engines", urls).Str("data_dir", dataDir).Msg("tinker API serving")
	return r, nil
}

// checkListen refuses a listen address it cannot parse, and one beyond
// loopback without an API key (ErrAPIKey).
func checkListen(listen, apiKey string) error {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("tinker: listen %q: %w", listen, err)
	}
	if ip := net.ParseIP(host); (ip == nil || !ip.IsLoopback()) && host != "localhost" && apiKey == "" {
		return fmt.Errorf("%w: listen %s", ErrAPIKey, listen)
	}
	return nil
}

// baseModel is the model the server trains and serves models of: a Hugging
// Face checkpoint of tinker.base_models (hf set) or the built-in policy (pm
// set).
type baseModel struct {
	// name is the base model's name in the API.
	name string
	// serve is what built-in engines serve.
	serve engine.Model
	pm    *model.Model
	hf    *hfBase
}

// resolveBase picks the base model: a Hugging Face checkpoint of
// tinker.base_models, or the built-in policy of tinker.base_weights.
func resolveBase(c config.Config, t config.TinkerConfig, dataDir string, o Options) (baseModel, error) {
	bm := baseModel{name: t.BaseModel}
	if bm.name == "" {
		bm.name = c.Engines.ServedModelName
	}
	hf, err := resolveHFBase(c, t, dataDir)
	if err != nil {
		return bm, fmt.Errorf("tinker: base model: %w", err)
	}
	if hf == nil {
		if bm.pm, err = builtinBase(t, c.Run.Seed); err != nil {
			return bm, err
		}
		bm.serve = bm.pm.Clone()
		return bm, nil
	}
	if o.NoLocalEngines && len(t.EngineURLs) == 0 {
		return bm, fmt.Errorf("tinker: base model %s: a Hugging Face base model on a cluster node's tinker role is not supported yet (the members' engines serve the run's model, not %s): run `asyncrl tinker serve` on its own, or list engines serving it in tinker.engine_urls", hf.entry.Name, hf.dir)
	}
	bm.name, bm.serve, bm.hf = hf.entry.Name, hf.model, hf
	if hf.created {
		o.Log.Info().Str("dir", hf.dir).Str("arch", string(hf.entry.Arch)).Int64("seed", c.Run.Seed).Msg("tinker: base model random-initialised")
	}
	return bm, nil
}

// builtinBase loads (or seeds) the built-in policy of tinker.base_weights,
// refusing a Hugging Face checkpoint there.
func builtinBase(t config.TinkerConfig, seed int64) (*model.Model, error) {
	em, err := wiring.InitialPolicy(t.BaseWeights, uint64(seed))
	if err != nil {
		return nil, fmt.Errorf("tinker: base model: %w", err)
	}
	pm, ok := em.(*model.Model)
	if !ok {
		return nil, fmt.Errorf("tinker: base_weights %s is a Hugging Face checkpoint, not the built-in policy: list it under tinker.base_models ({name, path}) and drop base_weights (docs/tinker.md \"Base models\")", t.BaseWeights)
	}
	return pm, nil
}

// backend is the base model's training backend: the Hugging Face exec
// backend, or tinker.trainer's backend for the built-in policy.
func (bm baseModel) backend(t config.TinkerConfig, dataDir string, log zerolog.Logger) (Backend, error) {
	if bm.hf != nil {
		return hfExecBackend(t, bm.hf, dataDir, log), nil
	}
	return trainBackend(t, bm.pm, dataDir, log)
}

// connectBus connects (or embeds) the run's NATS bus, owned by r.
func (r *Running) connectBus(ctx context.Context, c config.Config, dataDir string, log zerolog.Logger) (*nats.Conn, error) {
	bopts := natsbus.DefaultOptions()
	bopts.URL, bopts.Logger, bopts.MaxPayload = c.Bus.NATSURL, log, c.Bus.MaxPayloadBytes
	bopts.StoreDir = c.Bus.JetStreamDir
	if bopts.StoreDir == "" && bopts.URL == "" {
		bopts.StoreDir = filepath.Join(dataDir, "jetstream")
	}
	var err error
	if r.bus, err = natsbus.Connect(ctx, bopts); err != nil {
		return nil, fmt.Errorf("tinker: bus: %w", err)
	}
	return r.bus.Conn(), nil
}

// startEngines returns the engines' URLs: tinker.engine_urls, or those of
// built-in engines serving the base model it starts (owned by r) unless
// noLocal.
func (r *Running) startEngines(c config.Config, urls []string, noLocal bool, bm baseModel, log zerolog.Logger) ([]string, error) {
	if len(urls) != 0 || noLocal {
		return urls, nil
	}
	ec := c.Engines
	ec.ServedModelName = bm.name
	var err error
	if r.Engines, err = localengine.Start(ec, bm.serve, c.Run.Seed, log, nil); err != nil {
		return nil, err
	}
	for _, e := range r.Engines {
		urls = append(urls, e.URL)
	}
	return urls, nil
}

// serve listens on listen and serves r.Server's API in the background.
func (r *Running) serve(listen string) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("tinker: listen %s: %w", listen, err)
	}
	r.URL = "http://" + ln.Addr().String()
	r.srv = &http.Server{Handler: r.Server.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { r.done <- r.srv.Serve(ln) }()
	return nil
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
func trainBackend(t config.TinkerConfig, pm *model.Model, dataDir string, log zerolog.Logger) (Backend, error) {
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
