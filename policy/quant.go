package policy

import (
	"fmt"
	"strings"

	"github.com/asyncrl/asyncrl/weights/quant"
)

// Quant names how the weight matrices of a forward pass are quantised:
// an engine serving quantised weights (Model.Quantized) and a trainer
// faking the same quantisation in its forward pass
// (TrainerConfig.FakeQuant) use it.
type Quant string

// Quantisations.
const (
	// QuantNone serves and trains the weights as they are.
	QuantNone Quant = "none"
	// QuantINT4G32 and QuantINT4G128 are symmetric group-wise INT4 with
	// groups of 32 or 128 input elements (weights/quant.FakeQuantINT4).
	QuantINT4G32  Quant = "int4_g32"
	QuantINT4G128 Quant = "int4_g128"
)

// Quants lists the quantisations Model.Quantized knows.
func Quants() []Quant { return []Quant{QuantNone, QuantINT4G32, QuantINT4G128} }

// Validate refuses a name Quantized does not know ("" means none).
func (q Quant) Validate() error {
	for _, k := range Quants() {
		if q == k || q == "" {
			return nil
		}
	}
	names := make([]string, 0, len(Quants()))
	for _, k := range Quants() {
		names = append(names, string(k))
	}
	return fmt.Errorf("%w: quantisation must be one of %s, got %q", ErrConfig, strings.Join(names, ", "), q)
}

func (q Quant) off() bool { return q == "" || q == QuantNone }

// quantized reports whether tensor ts is one Quantized changes: a Linear
// layer's weight matrix. The embedding is a table lookup, not a matmul,
// and biases stay as they are, as in compressed-tensors W4A16
// checkpoints; the head is quantised (in this small model it is a third
// of the matmul weights, and a quantised lm_head is what makes its
// logits move).
func (ts tensor) quantized() bool {
	return len(ts.shape) == 2 && strings.HasSuffix(ts.name, ".weight") && ts.name != "embed.weight"
}

// quantizeWeights replaces every Linear weight matrix of m by what an
// engine serving q computes with: the matrix rounded to BF16 (a serving
// checkpoint's precision) then quantised and dequantised. Other tensors
// are left alone. It rebuilds the derived tables.
func (m *Model) quantizeWeights(q Quant) error {
	if q.off() {
		return nil
	}
	group := 32
	if q == QuantINT4G128 {
		group = 128
	}
	for _, ts := range m.tensors {
		if !ts.quantized() {
			continue
		}
		w := m.params[ts.off : ts.off+ts.n]
		for i, v := range w {
			w[i] = roundBF16(v)
		}
		if err := quant.FakeQuantINT4(w, w, ts.shape[0], ts.shape[1], group); err != nil {
			return fmt.Errorf("policy: quantising %s to %s: %w", ts.name, q, err)
		}
	}
	m.refresh()
	return nil
}

// Quantized returns a copy of m whose Linear weight matrices are what an
// engine serving q multiplies by (BF16, then quantised and dequantised);
// embeddings and biases are copied unchanged. QuantNone gives a plain
// Clone. m is not modified.
func (m *Model) Quantized(q Quant) (*Model, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	c := m.Clone()
	if err := c.quantizeWeights(q); err != nil {
		return nil, err
	}
	return c, nil
}

// Fake quantisation in the trainer (TrainerConfig.FakeQuant) with a
// straight-through estimator: while a step is open (Begin … Apply or
// Discard) and during Logprobs, the model holds Quantized's weights, so
// forward and backward run on FakeQuant(W) exactly as the engine serves
// them; the gradient with respect to FakeQuant(W) is applied to the FP32
// masters unchanged, which are restored before the AdamW step.

// fakeQuantIn swaps the fake-quantised weights in, keeping the masters.
func (t *Trainer) fakeQuantIn() error {
	q := Quant(t.cfg.FakeQuant)
	if q.off() || t.fqIn {
		return nil
	}
	if len(t.master) != len(t.model.params) {
		t.master = make([]float32, len(t.model.params))
	}
	copy(t.master, t.model.params)
	if err := t.model.quantizeWeights(q); err != nil {
		copy(t.model.params, t.master)
		t.model.refresh()
		return err
	}
	t.fqIn = true
	return nil
}

// fakeQuantOut restores the masters after fakeQuantIn.
func (t *Trainer) fakeQuantOut() {
	if !t.fqIn {
		return
	}
	copy(t.model.params, t.master)
	t.model.refresh()
	t.fqIn = false
}

// masterParams are the FP32 masters, also while a fake-quantised step is
// open.
func (t *Trainer) masterParams() []float32 {
	if t.fqIn {
		return t.master
	}
	return t.model.params
}
