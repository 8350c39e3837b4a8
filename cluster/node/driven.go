package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/engine/driver"
)

// drivenEngine is an engine the node keeps on the run's weights through its
// driver, over the engine's HTTP API: a built-in engine the node started
// (local) or one started elsewhere (engines.external: vLLM, SGLang or an
// asyncrl engine). Pause, load and resume are HTTP calls for both.
type drivenEngine struct {
	name, url string
	drv       driver.Driver
	// load is how versions reach it: full (the node's receiver rebuilds
	// the checkpoint and the engine loads the directory) or delta (the
	// engine applies each delta in place; a gap falls back to full).
	load config.WeightLoad
	// local is the engine the node started, nil for an external one.
	local *localEngine
}

// engineHTTP is the client the node drives engines with: no proxies (the
// engines are on this machine or the cluster's network), pooled.
var engineHTTP = &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 16}}

// driveLocal wraps a built-in engine the node started: the vLLM driver on
// its URL, loading full checkpoints the node's receiver rebuilt.
func driveLocal(le *localEngine, model string) (*drivenEngine, error) {
	d, err := driver.New(driver.KindBuiltin, le.url, driver.Options{Client: engineHTTP, Model: model})
	if err != nil {
		return nil, fmt.Errorf("node: %s: %w", le.name, err)
	}
	return &drivenEngine{name: le.name, url: le.url, drv: d, load: config.LoadFull, local: le}, nil
}

// driveExternal builds the driver of engines.external[i]; its name is
// external-<i>.
func driveExternal(i int, e config.ExternalEngine, model string) (*drivenEngine, error) {
	d, err := driver.New(driver.Kind(e.Kind), e.URL, driver.Options{Client: engineHTTP, Model: model})
	if err != nil {
		return nil, fmt.Errorf("%w: engines.external[%d]: %w", ErrConfig, i, err)
	}
	return &drivenEngine{name: fmt.Sprintf("external-%d", i), url: d.URL(), drv: d, load: e.WeightLoad}, nil
}

// gone maps a failed call to engine.ErrClosed when the engine is one the
// node stopped (a chaos test's kill): it leaves rotation for good. An
// external engine's failures are never final: the next dispatch retries.
func (d *drivenEngine) gone(err error) error {
	if err != nil && d.local != nil && d.local.closed.Load() {
		return fmt.Errorf("%w: %w", engine.ErrClosed, err)
	}
	return err
}

// swap pauses the engine in mode, runs load and resumes it, whatever load
// did: an engine is never left paused by a failed load (it keeps serving
// the weights it had, which the router's version gate accounts for).
// Pausing in abort or wait mode also drops the prefix cache: its KV blocks
// were computed by the old weights (SkyRL resets it after every sync). In
// keep mode the frozen requests keep theirs, as vLLM does (it ignores
// clear_cache with keep).
func (d *drivenEngine) swap(ctx context.Context, mode string, load func() error) error {
	if err := d.drv.Pause(ctx, driver.PauseMode(mode), mode != string(config.PauseKeep)); err != nil {
		// A "wait" pause cut short (ctx ended) leaves the engine paused:
		// let it serve its current weights rather than nothing.
		rerr := d.resume()
		return d.gone(errors.Join(err, rerr))
	}
	err := load()
	return d.gone(errors.Join(err, d.resume()))
}

// resume resumes with its own deadline: the swap's context may be the
// one that ended.
func (d *drivenEngine) resume() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return d.drv.Resume(ctx)
}

// preflight checks, before the run starts, that an external engine
// answers every route the run will use, so a missing flag fails the start
// with the engine's name and the fix instead of the first publish.
func (d *drivenEngine) preflight(ctx context.Context, model string) error {
	if err := d.drv.Health(ctx); err != nil {
		return fmt.Errorf("%s (%s): %w", d.name, d.url, err)
	}
	if _, err := d.drv.IsPaused(ctx); err != nil && !errors.Is(err, driver.ErrUnsupported) {
		return fmt.Errorf("%s (%s): %w", d.name, d.url, err)
	}
	names, err := d.drv.Models(ctx)
	if err != nil {
		return fmt.Errorf("%s (%s): %w", d.name, d.url, err)
	}
	found := false
	for _, n := range names {
		found = found || n == model
	}
	if !found {
		return fmt.Errorf("%s (%s) serves %q, not %q: start it with --served-model-name %s or set engines.served_model_name", d.name, d.url, names, model, model)
	}
	if _, err := d.drv.ServedVersion(ctx); err != nil && d.drv.Kind() != driver.KindSGLang {
		return fmt.Errorf("%s (%s): %w", d.name, d.url, err)
	}
	return nil
}

// checkExternal refuses engines.external where the run cannot drive them:
// they take versions on the delta publisher's acknowledged path (through
// the object store, not the in-memory data plane), and the built-in
// policy has no LoRA adapters to publish.
func checkExternal(cfg config.Config, remote bool) error {
	if len(cfg.Engines.External) == 0 {
		return nil
	}
	switch {
	case remote:
		return fmt.Errorf("%w: engines.external: a cluster node's engines are its own (engine role); list external engines on a single-node run", ErrConfig)
	case cfg.Publisher.Mode != config.PublishDelta:
		return fmt.Errorf("%w: engines.external need publisher.mode delta (mode %s swaps built-in engines in memory)", ErrConfig, cfg.Publisher.Mode)
	case cfg.Publisher.Transport == config.TransportDataPlane:
		return fmt.Errorf("%w: engines.external need publisher.transport store (the data plane swaps built-in engines in memory)", ErrConfig)
	}
	if tok := cfg.Engines.External[0].Tokenizer; tok != "" && cfg.Trainer.Backend == config.BackendBuiltin {
		return fmt.Errorf("%w: engines.external[0].tokenizer: the built-in trainer trains the built-in policy (its character vocabulary); a model with %s needs trainer.backend exec or remote", ErrConfig, tok)
	}
	for i, e := range cfg.Engines.External {
		if e.Kind == config.EngineSGLang && cfg.Trainer.PauseMode == config.PauseWait {
			return fmt.Errorf("%w: engines.external[%d]: SGLang's /pause_generation has no wait mode (abort or in_place); set trainer.pause_mode keep or abort", ErrConfig, i)
		}
		if e.WeightLoad == config.LoadLoRA {
			return fmt.Errorf("%w: engines.external[%d].weight_load: lora needs a LoRA publisher; the built-in policy has no adapters (use delta or full)", ErrConfig, i)
		}
	}
	return nil
}

// driveEngines wraps the node's engines and engines.external in drivers,
// checks each external engine's routes before anything depends on them,
// and loads the run's version 0 into them (they start with weights of
// their own).
func (n *Node) driveEngines(ctx context.Context) error {
	for _, le := range n.engines {
		d, err := driveLocal(le, n.cfg.Engines.ServedModelName)
		if err != nil {
			return err
		}
		n.driven = append(n.driven, d)
	}
	for i, e := range n.cfg.Engines.External {
		d, err := driveExternal(i, e, n.cfg.Engines.ServedModelName)
		if err != nil {
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = d.preflight(pctx, n.cfg.Engines.ServedModelName)
		cancel()
		if err != nil {
			return fmt.Errorf("%w: engines.external[%d]: %w", ErrConfig, i, err)
		}
		n.driven = append(n.driven, d)
	}
	return nil
}

// loadBase makes an external engine serve the run's version 0 (the base
// checkpoint directory, which it must be able to read).
func loadBase(ctx context.Context, d *drivenEngine, baseDir, mode string) error {
	lctx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	if err := d.swap(lctx, mode, func() error { return d.drv.LoadCheckpoint(lctx, baseDir, 0) }); err != nil {
		return fmt.Errorf("node: %s (%s): loading the run's version 0 from %s: %w", d.name, d.url, baseDir, err)
	}
	return nil
}
