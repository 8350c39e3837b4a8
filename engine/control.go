package engine

import (
	"context"
	"fmt"

	"github.com/asyncrl/asyncrl/engine/latency"
)

// Pause stops the engine in one of vLLM's modes: "keep" freezes queued and
// running requests (they continue after Resume, with whatever weights are
// then installed); "abort" ends in-flight requests now with their partial
// output and finish_reason "abort"; "wait" lets in-flight requests finish
// and returns when they have (or ctx ends). New requests wait for Resume in
// every mode. clearCache drops the prefix cache.
func (e *Engine) Pause(ctx context.Context, mode string, clearCache bool) error {
	switch mode {
	case "", "keep", "abort", "wait":
	default:
		return fmt.Errorf("engine: pause mode must be keep, abort or wait, got %q", mode)
	}
	if mode == "" {
		mode = "keep"
	}
	e.mu.Lock()
	e.paused, e.pauseMode = true, mode
	if mode == "abort" {
		e.abortLocked(nil, false)
	}
	if clearCache {
		e.core.ResetPrefixCache()
	}
	e.changedLocked()
	if mode != "wait" {
		e.mu.Unlock()
		return nil
	}
	for len(e.seqs) > 0 {
		tick := e.tick
		e.mu.Unlock()
		select {
		case <-tick:
		case <-ctx.Done():
			return ctx.Err()
		}
		e.mu.Lock()
	}
	e.mu.Unlock()
	return nil
}

// Resume undoes Pause: frozen requests continue and held ones are queued.
func (e *Engine) Resume() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.paused, e.pauseMode = false, ""
	if !e.sleeping {
		e.releaseHeldLocked()
	}
	e.changedLocked()
}

// IsPaused reports whether the engine is paused.
func (e *Engine) IsPaused() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.paused
}

// Sleep freezes the engine like a keep-mode pause and drops the prefix
// cache (vLLM frees the KV cache when sleeping).
func (e *Engine) Sleep() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.sleeping = true
	e.core.ResetPrefixCache()
	e.changedLocked()
}

// WakeUp undoes Sleep.
func (e *Engine) WakeUp() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.sleeping = false
	if !e.paused {
		e.releaseHeldLocked()
	}
	e.changedLocked()
}

// IsSleeping reports whether the engine sleeps.
func (e *Engine) IsSleeping() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sleeping
}

// Abort ends the named requests (all when ids is empty), including ones
// held by a pause, and returns how many sequences it ended.
func (e *Engine) Abort(ids []string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.abortLocked(ids, true)
}

// ResetPrefixCache forgets every cached prefix.
func (e *Engine) ResetPrefixCache() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.core.ResetPrefixCache()
}

// LoadLoRA serves the adapter at path as model name, replacing one of
// that name. A PEFT adapter directory (adapter_config.json, IsPEFTAdapter)
// is read with the AdapterLoader and applied onto the served model (and
// re-applied onto each later one: WithAdapterLoader); any other path is
// loaded whole with the ModelLoader (and the ModelTransform), a model
// served beside the base.
func (e *Engine) LoadLoRA(name, path string) error {
	if err := e.allowPath("LoRA adapter", path); err != nil {
		return err
	}
	if IsPEFTAdapter(path) {
		return e.loadAdapter(name, path)
	}
	if e.loader == nil {
		return ErrNoLoader
	}
	m, err := e.loader(path)
	if err == nil {
		m, err = e.transform(m)
	}
	if err != nil {
		return fmt.Errorf("engine: load LoRA %q from %s: %w", name, path, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.loras[name] = m
	delete(e.adapters, name) // a whole model now: nothing to re-apply
	return nil
}

// UnloadLoRA stops serving an adapter; its live requests end with "abort".
func (e *Engine) UnloadLoRA(name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.loras[name]
	delete(e.loras, name)
	delete(e.adapters, name)
	return ok
}

// Stats is a snapshot of the engine for in-process callers (the same
// numbers /metrics exposes).
type Stats struct {
	latency.Stats
	// Held counts sequences waiting for Resume/WakeUp outside the queue.
	Held     int
	Version  int64
	Paused   bool
	Sleeping bool
	Loaded   bool
	// Updating is true between /start_weight_update and
	// /finish_weight_update (informational: the engine keeps serving).
	Updating bool
}

// Stats returns a snapshot of the engine's load and state.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return Stats{Stats: e.core.Stats(), Held: len(e.held), Version: e.version, Paused: e.paused, Sleeping: e.sleeping, Loaded: e.model != nil, Updating: e.updating}
}
