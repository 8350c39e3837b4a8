package engine

import "fmt"

// ModelTransform turns a model as it was loaded into the model the engine
// serves, e.g. quantising its weight matrices (engines.quantize). It must
// not modify its argument (a caller may serve it elsewhere) and must be
// safe to call from any goroutine.
type ModelTransform func(Model) (Model, error)

// WithModelTransform makes the engine serve f(m) for every model it is
// given: the initial model, SetModel, every checkpoint load
// (LoadWeights, /update_weights, ApplyDelta) and LoRA adapters. name says
// what f does in logs and errors. The CLI wires engines.quantize here with
// the built-in policy's Quantized, so the engine quantises each version
// it loads and serves the dequantised values, as an INT4 or FP8 kernel
// would compute with them.
func WithModelTransform(name string, f ModelTransform) Option {
	return func(e *Engine) { e.xformName, e.xform = name, f }
}

// transform applies the configured ModelTransform to m (none: m itself).
func (e *Engine) transform(m Model) (Model, error) {
	if e.xform == nil || m == nil {
		return m, nil
	}
	out, err := e.xform(m)
	if err != nil {
		return nil, fmt.Errorf("engine: %s: %w", e.xformName, err)
	}
	if out == nil {
		return nil, fmt.Errorf("engine: %s returned no model", e.xformName)
	}
	return out, nil
}
