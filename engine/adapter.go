package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// PEFTConfigName marks a LoRA adapter directory in PEFT's layout
// (adapter_config.json beside adapter_model.safetensors): what vLLM's
// /v1/load_lora_adapter loads and PEFT's save_pretrained writes.
const PEFTConfigName = "adapter_config.json"

// ErrNoAdapterLoader is returned when a PEFT adapter directory is loaded
// as a LoRA but no AdapterLoader was given (WithAdapterLoader).
var ErrNoAdapterLoader = errors.New("engine: no LoRA adapter loader configured")

// Adapter is a LoRA adapter read from disk, independent of the weights it
// will adapt. Apply returns base with the adapter applied and must not
// modify base (the engine keeps serving it).
type Adapter interface {
	Apply(base Model) (Model, error)
}

// AdapterLoader reads the PEFT adapter directory dir.
type AdapterLoader func(dir string) (Adapter, error)

// WithAdapterLoader makes LoadLoRA (and /v1/load_lora_adapter) apply a
// PEFT adapter directory onto the model the engine serves, as vLLM
// serves a LoRA on top of its base weights, instead of loading the path
// as a whole model with the ModelLoader. The adapter is applied to the
// served model as it is (after any ModelTransform: an adapter on a
// quantised base adds its unquantised low-rank update, as vLLM's LoRA
// layers do), and again onto every later base (SetModel, LoadWeights,
// /update_weights): an adapter always adapts the weights being served.
func WithAdapterLoader(l AdapterLoader) Option { return func(e *Engine) { e.adapterLoader = l } }

// IsPEFTAdapter reports whether dir holds adapter_config.json.
func IsPEFTAdapter(dir string) bool {
	fi, err := os.Stat(filepath.Join(dir, PEFTConfigName))
	return err == nil && fi.Mode().IsRegular()
}

// loadAdapter reads the PEFT adapter at path, applies it onto the served
// model and serves the result as name. loraMu keeps a concurrent SetModel
// from swapping the base between the apply and the install.
func (e *Engine) loadAdapter(name, path string) error {
	if e.adapterLoader == nil {
		return fmt.Errorf("engine: load LoRA %q from %s: %w (a PEFT adapter needs a base model that takes adapters, e.g. a Hugging Face checkpoint)", name, path, ErrNoAdapterLoader)
	}
	ad, err := e.adapterLoader(path)
	if err != nil {
		return fmt.Errorf("engine: load LoRA %q from %s: %w", name, path, err)
	}
	e.loraMu.Lock()
	defer e.loraMu.Unlock()
	e.mu.Lock()
	base, closed := e.model, e.closed
	e.mu.Unlock()
	switch {
	case closed:
		return ErrClosed
	case base == nil:
		return fmt.Errorf("engine: load LoRA %q from %s: no base model loaded to adapt", name, path)
	}
	m, err := ad.Apply(base)
	if err != nil {
		return fmt.Errorf("engine: load LoRA %q from %s: %w", name, path, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.loras[name] = m
	e.adapters[name] = ad
	return nil
}

// rebaseAdapters applies every loaded PEFT adapter onto base (the model
// SetModel is about to serve). An adapter the new base refuses is
// reported in failed and is to be unloaded: serving it on the old
// weights would be serving another model than the one requested.
// Caller holds loraMu (not mu).
func (e *Engine) rebaseAdapters(base Model) (ok map[string]Model, failed map[string]error) {
	e.mu.Lock()
	ads := make(map[string]Adapter, len(e.adapters))
	for n, a := range e.adapters {
		ads[n] = a
	}
	e.mu.Unlock()
	ok = make(map[string]Model, len(ads))
	failed = map[string]error{}
	for n, a := range ads {
		m, err := a.Apply(base)
		if err != nil {
			failed[n] = err
			continue
		}
		ok[n] = m
	}
	return ok, failed
}
