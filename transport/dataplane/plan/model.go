package plan

import (
	"errors"
	"fmt"
)

// DType is an element type; its value is the element size in bytes.
type DType int

const (
	FP8  DType = 1
	BF16 DType = 2
	FP32 DType = 4
)

// Size is the element size in bytes.
func (d DType) Size() int64 { return int64(d) }

// Special Tensor.Layer values.
const (
	// LayerEmbed pins a tensor (token embeddings) to the first pipeline stage.
	LayerEmbed = -1
	// LayerHead pins a tensor (final norm, LM head) to the last stage.
	LayerHead = -2
)

// Tensor is one named weight.
type Tensor struct {
	// Name, e.g. "model.layers.3.mlp.experts.7.up_proj.weight".
	Name string
	// Shape, outermost first; at least one dimension, all > 0.
	Shape []int64
	// DType of the elements.
	DType DType
	// Layer decides the pipeline stage: 0..Model.Layers-1, LayerEmbed or LayerHead.
	Layer int
	// TPDim is the dimension split across tensor-parallel ranks (column
	// parallel: 0 for [out, in] weights; row parallel: 1); -1 replicates
	// the tensor on every TP rank (norms, routers).
	TPDim int
	// Expert is the routed expert index (0..Model.Experts-1), or -1 for dense.
	Expert int
}

// Model is a tensor list with the sizes the layouts split by.
type Model struct {
	// Name for reports.
	Name string
	// Layers is the number of transformer layers (pipeline split unit).
	Layers int
	// Experts is the number of routed experts per MoE layer (0: dense model).
	Experts int
	// Tensors in storage order.
	Tensors []Tensor
}

// Bytes is the tensor's full size.
func (t *Tensor) Bytes() int64 {
	n := t.DType.Size()
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// splitDim is the dimension slabs are cut along: TPDim, or the outermost
// one for tensors no layout splits (so whole-tensor pieces are one block).
func (t *Tensor) splitDim() int {
	if t.TPDim >= 0 && t.Expert < 0 {
		return t.TPDim
	}
	return 0
}

// geometry returns (outer blocks, bytes per index of the split dimension,
// extent of the split dimension).
func (t *Tensor) geometry() (outer, inner, extent int64) {
	d := t.splitDim()
	outer, inner = 1, t.DType.Size()
	for i, s := range t.Shape {
		switch {
		case i < d:
			outer *= s
		case i > d:
			inner *= s
		}
	}
	return outer, inner, t.Shape[d]
}

// Bytes is the model's total size.
func (m *Model) Bytes() int64 {
	var n int64
	for i := range m.Tensors {
		n += m.Tensors[i].Bytes()
	}
	return n
}

// Sentinel errors; failures wrap them with the tensor, rank and slab.
var (
	// ErrBadLayout: a layout or model the planner cannot shard as described.
	ErrBadLayout = errors.New("plan: bad layout")
	// ErrMissing: bytes an inference rank holds that no transfer delivers.
	ErrMissing = errors.New("plan: missing range")
	// ErrOverlap: bytes delivered twice to the same inference rank.
	ErrOverlap = errors.New("plan: overlapping ranges")
	// ErrNotOwned: a transfer from a rank that does not hold those bytes, or
	// to a rank that does not need them.
	ErrNotOwned = errors.New("plan: range not owned")
	// ErrBadRun: a transfer's byte run disagrees with the layouts' offsets.
	ErrBadRun = errors.New("plan: byte run does not match the layouts")
)

// Validate checks the tensor list on its own.
func (m *Model) Validate() error {
	if m.Layers < 1 {
		return fmt.Errorf("%w: model %s: Layers must be >= 1, got %d", ErrBadLayout, m.Name, m.Layers)
	}
	for i := range m.Tensors {
		t := &m.Tensors[i]
		if len(t.Shape) == 0 {
			return fmt.Errorf("%w: tensor %s: empty shape", ErrBadLayout, t.Name)
		}
		for _, s := range t.Shape {
			if s <= 0 {
				return fmt.Errorf("%w: tensor %s: shape %v has a dimension <= 0", ErrBadLayout, t.Name, t.Shape)
			}
		}
		if t.DType.Size() <= 0 {
			return fmt.Errorf("%w: tensor %s: dtype size %d", ErrBadLayout, t.Name, t.DType)
		}
		if t.Layer != LayerEmbed && t.Layer != LayerHead && (t.Layer < 0 || t.Layer >= m.Layers) {
			return fmt.Errorf("%w: tensor %s: Layer %d outside [0,%d) and not LayerEmbed/LayerHead", ErrBadLayout, t.Name, t.Layer, m.Layers)
		}
		if t.TPDim >= len(t.Shape) {
			return fmt.Errorf("%w: tensor %s: TPDim %d but only %d dims", ErrBadLayout, t.Name, t.TPDim, len(t.Shape))
		}
		if t.Expert >= m.Experts {
			return fmt.Errorf("%w: tensor %s: Expert %d but the model has %d experts", ErrBadLayout, t.Name, t.Expert, m.Experts)
		}
	}
	return nil
}
