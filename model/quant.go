package model

import (
	"fmt"
	"slices"
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

// QuantFP8 and QuantMXFP8 are weights/quant's block-wise FP8 (128×128
// blocks, FP32 scales) and MXFP8 (32-element blocks, E8M0 scales):
// serving only, the trainer fakes INT4.
const (
	QuantFP8   Quant = "fp8"
	QuantMXFP8 Quant = "mxfp8"
)

// Quants lists the quantisations Model.Quantized knows.
func Quants() []Quant { return []Quant{QuantNone, QuantINT4G32, QuantINT4G128, QuantFP8, QuantMXFP8} }

// FakeQuants lists the quantisations a trainer can fake
// (TrainerConfig.FakeQuant).
func FakeQuants() []Quant { return []Quant{QuantNone, QuantINT4G32, QuantINT4G128} }

// fakeQuantable reports whether TrainerConfig.FakeQuant may be q.
func fakeQuantable(q string) bool { return q == "" || slices.Contains(FakeQuants(), Quant(q)) }

func quantNames(qs []Quant) string {
	names := make([]string, 0, len(qs))
	for _, k := range qs {
		names = append(names, string(k))
	}
	return strings.Join(names, ", ")
}

// Validate refuses a name Quantized does not know ("" means none).
func (q Quant) Validate() error {
	if q == "" || slices.Contains(Quants(), q) {
		return nil
	}
	return fmt.Errorf("%w: quantisation must be one of %s, got %q", ErrConfig, quantNames(Quants()), q)
}

func (q Quant) off() bool { return q == "" || q == QuantNone }

// quantizeWeights turns m into the model an engine serving q computes
// with: every tensor rounded to BF16 (a serving checkpoint's precision),
// then every Linear weight matrix (quantizable: layers.*.weight,
// head.weight and each expert's matrix of a mixture; the embedding is a
// lookup, biases are added in full precision, as in compressed-tensors
// and FP8 checkpoints, and an MoE router stays unquantised, as in vLLM)
// quantised and dequantised. It rebuilds the derived tables.
func (m *Model) quantizeWeights(q Quant) error {
	if q.off() {
		return nil
	}
	var scheme quant.Scheme
	group := 32
	switch q {
	case QuantINT4G128:
		group = 128
	case QuantFP8, QuantMXFP8:
		var err error
		if scheme, err = quant.Lookup(string(q)); err != nil {
			return err
		}
	}
	for _, ts := range m.tensors {
		w := m.params[ts.off : ts.off+ts.n]
		for i, v := range w {
			w[i] = roundBF16(v)
		}
		if !quantizable(ts) {
			continue
		}
		var err error
		if scheme == nil {
			// group-wise along a row: a 3-D tensor's matrices stacked
			// are one [n·rows, cols] matrix
			n, rows, cols := ts.matrices()
			err = quant.FakeQuantINT4(w, w, n*rows, cols, group)
		} else {
			var qw, sc quant.Tensor
			if qw, sc, _, err = quantizeTensor(scheme, ts, w); err == nil {
				err = dequantizeTensor(scheme, ts, qw, sc, w)
			}
		}
		if err != nil {
			return fmt.Errorf("model: quantising %s to %s: %w", ts.name, q, err)
		}
	}
	m.refresh()
	return nil
}

// Quantized returns the copy of m an engine serving q computes with:
// every tensor rounded to BF16, the Linear weight matrices then quantised
// and dequantised. QuantNone gives a plain Clone (no rounding). m is not
// modified.
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
// forward and backward run on exactly the weights the engine serves
// (FakeQuant(W) for the Linear matrices, BF16 for the rest); the gradient
// with respect to them is applied to the FP32 masters unchanged, which are
// restored before the AdamW step.

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
