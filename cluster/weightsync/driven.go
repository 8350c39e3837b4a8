package weightsync

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/asyncrl/asyncrl/cluster/localengine"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/engine/driver"
	"github.com/asyncrl/asyncrl/wiring"
)

// Driven is an engine kept on the run's weights through its driver, over
// the engine's HTTP API: a built-in engine this process started (Local)
// or one started elsewhere (engines.external: vLLM, SGLang or an asyncrl
// engine). Pause, load and resume are HTTP calls for both.
type Driven struct {
	Name, URL string
	Driver    driver.Driver
	// Load is how versions reach it: full (the receiver rebuilds the
	// checkpoint and the engine loads the directory) or delta (the
	// engine applies each delta in place; a gap falls back to full).
	Load config.WeightLoad
	// Local is the engine this process started, nil for an external one.
	Local *localengine.Engine
}

// engineHTTP is the client engines are driven with: no proxies (the
// engines are on this machine or the cluster's network), pooled.
var engineHTTP = &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 16}}

// DriveLocal wraps a built-in engine this process started: the vLLM
// driver on its URL (sending apiKey, the built-in engines' key, when set),
// loading full checkpoints a receiver rebuilt.
func DriveLocal(le *localengine.Engine, model, apiKey string) (*Driven, error) {
	d, err := driver.New(driver.KindBuiltin, le.URL, driver.Options{Client: engineHTTP, Model: model, APIKey: apiKey})
	if err != nil {
		return nil, fmt.Errorf("node: %s: %w", le.Name, err)
	}
	return &Driven{Name: le.Name, URL: le.URL, Driver: d, Load: config.LoadFull, Local: le}, nil
}

// DriveExternal builds the driver of engines.external[i]; its name is
// external-<i>.
func DriveExternal(i int, e config.ExternalEngine, model string) (*Driven, error) {
	key, err := wiring.ReadSecret(fmt.Sprintf("engines.external[%d].api_key_file", i), e.APIKeyFile)
	if err != nil {
		return nil, err
	}
	d, err := driver.New(driver.Kind(e.Kind), e.URL, driver.Options{Client: engineHTTP, Model: model, APIKey: key})
	if err != nil {
		return nil, err
	}
	return &Driven{Name: fmt.Sprintf("external-%d", i), URL: d.URL(), Driver: d, Load: e.EffectiveLoad()}, nil
}

// ErrEngineGone marks a load that failed because its engine is one this
// process stopped (a chaos test's kill, a term switch): the engine leaves
// rotation for good (the Agent tells its Reporter Leave, not Failed).
var ErrEngineGone = errors.New("weightsync: the engine was stopped")

// gone wraps a failed call in ErrEngineGone when the engine is one this
// process stopped. An external engine's failures are never final: the
// next dispatch retries.
func (d *Driven) gone(err error) error {
	if err != nil && d.Local != nil && d.Local.Closed() {
		return fmt.Errorf("%w: %w", ErrEngineGone, err)
	}
	return err
}

// swap pauses the engine in mode, runs load and resumes it, whatever load
// did: an engine is never left paused by a failed load (it keeps serving
// the weights it had, which the router's version gate accounts for).
// Pausing in abort or wait mode also drops the prefix cache: its KV blocks
// were computed by the old weights (SkyRL resets it after every sync).
//
// In keep mode the frozen requests hold KV the old weights computed, and
// vLLM refuses to drop a prefix cache while requests hold blocks, so a
// plain reset would leave old-weight blocks for new requests to reuse —
// their tokens stamped with the new version. After a successful load the
// swap therefore drops every request's KV (a reset with
// ResetOptions.Running: the frozen requests are recomputed on the new
// weights); where the engine cannot (SGLang, a vLLM before 0.17, or a
// failing call) it aborts the frozen requests with the cache (the
// rollouts retry them) rather than resume on stale KV. An engine with no
// such reset at all (SGLang) swaps as abort from the start.
func (d *Driven) swap(ctx context.Context, mode string, load func() error) error {
	keep := mode == string(config.PauseKeep)
	pause, dropAfter := swapPause(mode, keep && driver.ResetsRunning(ctx, d.Driver))
	if err := d.Driver.Pause(ctx, pause, pause != driver.PauseKeep); err != nil {
		// A "wait" pause cut short (ctx ended) leaves the engine paused:
		// let it serve its current weights rather than nothing.
		rerr := d.resume()
		return d.gone(errors.Join(err, rerr))
	}
	err := load()
	if err == nil && dropAfter {
		err = d.dropStaleKV(ctx)
	}
	return d.gone(errors.Join(err, d.resume()))
}

// swapPause is the mode a swap in mode pauses with, and whether it drops
// the frozen requests' KV after the load (resetsRunning: the engine can).
// Keep on an engine that cannot drop running requests' KV (SGLang; vLLM
// before 0.17.0 or of unknown release) pauses with abort from the start:
// the frozen requests would have to be aborted after the load anyway, and
// SGLang cannot abort them once frozen — its scheduler, paused in_place,
// runs no forward pass, and a running request's abort takes effect only
// at one (Scheduler.abort_request), so a post-load abort never drains.
// Every other mode pauses as asked and clears the cache with the pause.
func swapPause(mode string, resetsRunning bool) (pause driver.PauseMode, dropAfter bool) {
	if mode != string(config.PauseKeep) {
		return driver.PauseMode(mode), false
	}
	if !resetsRunning {
		return driver.PauseAbort, false
	}
	return driver.PauseKeep, true
}

// dropStaleKV ends a keep-mode swap's load: every request's KV recomputed
// on the new weights, or (engine cannot) the frozen requests aborted and
// the cache dropped.
func (d *Driven) dropStaleKV(ctx context.Context) error {
	kerr := driver.ResetPrefixCacheWith(ctx, d.Driver, driver.ResetOptions{Running: true})
	if kerr == nil {
		return nil
	}
	// With its own deadline, as resume: the swap's context may be what
	// ended (and failed the reset), and resume follows regardless — an
	// abort sent on the ended context would fail and leave the frozen
	// requests to resume on the old weights' KV.
	actx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if aerr := d.Driver.Pause(actx, driver.PauseAbort, true); aerr != nil {
		return fmt.Errorf("keep-mode swap: the new weights are loaded but KV from the old ones could not be dropped (%w), nor the frozen requests aborted: %w", kerr, aerr)
	}
	return nil
}

// resume resumes with its own deadline: the swap's context may be the
// one that ended.
func (d *Driven) resume() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return d.Driver.Resume(ctx)
}

// Preflight checks, before the run starts, what the run needs of an
// external engine (driver.Check with needs n, NeedsOf of the run's
// config): every FAIL finding fails the start, naming the engine, what
// was found and the fix, instead of the first publish or rollout turn.
func (d *Driven) Preflight(ctx context.Context, n driver.Needs) error {
	failed := driver.Failed(driver.Check(ctx, d.Driver, n))
	if len(failed) == 0 {
		return nil
	}
	msgs := make([]string, len(failed))
	for i, f := range failed {
		msgs[i] = f.Check + ": " + f.Detail
		if f.Fix != "" {
			msgs[i] += " (fix: " + f.Fix + ")"
		}
	}
	return fmt.Errorf("%s (%s) %s: %s", d.Name, d.URL, d.Driver.Kind(), strings.Join(msgs, "; "))
}

// LoadBase makes an external engine serve the run's version 0 (the base
// checkpoint directory, which it must be able to read).
func (d *Driven) LoadBase(ctx context.Context, baseDir, mode string) error {
	lctx, cancel := context.WithTimeout(ctx, SyncTimeout)
	defer cancel()
	if err := d.swap(lctx, mode, func() error { return d.Driver.LoadCheckpoint(lctx, baseDir, 0) }); err != nil {
		return fmt.Errorf("node: %s (%s): loading the run's version 0 from %s: %w", d.Name, d.URL, baseDir, err)
	}
	return nil
}
