package bridge

import (
	"encoding/binary"
	"fmt"

	"github.com/asyncrl/asyncrl/model"
)

// Replay arrays of TrainBatch (optional arrays of frames v1, issue 19; no
// version bump: absent means what v1 always meant, and a child that does
// not know them answers Error{bad_field, field: "arrays.routes"}, so they
// are never dropped silently):
//
//	routes   int32 [T, L, K]  the engines' routed experts (R3), row p the
//	                          forward pass whose input ends at token p
//	support  int32 [T, K]     sample support sets, −1 padding; read only
//	                          under the loss mask, with normalize_over_support

// Int32TensorShaped builds an int32 tensor of the given C-order shape
// (prod(shape) == len(v)).
func Int32TensorShaped(v []int32, shape ...int64) Tensor {
	t := Int32Tensor(v)
	t.Shape = shape
	return t
}

// CheckShape verifies t has dtype, len(want) dims and each dim equal to
// want's (−1: any size ≥ 1), and a data length that agrees.
func (t Tensor) CheckShape(dtype string, want ...int64) error {
	if t.DType != dtype {
		return fmt.Errorf("dtype %q, want %q", t.DType, dtype)
	}
	if len(t.Shape) != len(want) {
		return fmt.Errorf("shape %v, want %d dims", t.Shape, len(want))
	}
	n := int64(1)
	for i, d := range t.Shape {
		if d < 1 && !(d == 0 && want[i] == 0) || want[i] >= 0 && d != want[i] || d > 1<<31 {
			return fmt.Errorf("shape %v, want %v (-1: any)", t.Shape, want)
		}
		n *= d
		if n > 1<<40 {
			return fmt.Errorf("shape %v too large", t.Shape)
		}
	}
	if int64(len(t.Data)) != n*int64(itemSize(dtype)) {
		return fmt.Errorf("%d data bytes for shape %v of %s", len(t.Data), t.Shape, dtype)
	}
	return nil
}

// RoutesTensor packs the sequences' routes as int32 [T, layers, topK];
// false when no sequence has routes. A sequence without routes gets
// arange(topK) padding rows (the trainer then replays experts it never
// trained on only if its loss mask is set, which the rollout avoids).
func RoutesTensor(seqs []model.Sequence, layers, topK int) (Tensor, bool) {
	stride := layers * topK
	has := false
	var n int
	for _, s := range seqs {
		n += len(s.Tokens)
		has = has || s.Routes != nil
	}
	if !has || stride <= 0 {
		return Tensor{}, false
	}
	b := make([]byte, 0, 4*n*stride)
	for _, s := range seqs {
		if s.Routes != nil {
			for _, v := range s.Routes {
				b = binary.LittleEndian.AppendUint32(b, uint32(v))
			}
			continue
		}
		for range len(s.Tokens) * layers {
			for k := range topK {
				b = binary.LittleEndian.AppendUint32(b, uint32(k))
			}
		}
	}
	return Tensor{DType: Int32, Shape: []int64{int64(n), int64(layers), int64(topK)}, Data: b}, true
}

// SupportTensor packs the sequences' support sets as int32 [T, K] with −1
// padding, K the longest row; false when no sequence has one.
func SupportTensor(seqs []model.Sequence) (Tensor, bool) {
	k, n := 0, 0
	for _, s := range seqs {
		n += len(s.Tokens)
		for _, r := range s.Support {
			k = max(k, len(r))
		}
	}
	if k == 0 {
		return Tensor{}, false
	}
	b := make([]byte, 0, 4*n*k)
	for _, s := range seqs {
		for i := range s.Tokens {
			var row []int32
			if s.Support != nil {
				row = s.Support[i]
			}
			for j := range k {
				v := int32(-1)
				if j < len(row) {
					v = row[j]
				}
				b = binary.LittleEndian.AppendUint32(b, uint32(v))
			}
		}
	}
	return Tensor{DType: Int32, Shape: []int64{int64(n), int64(k)}, Data: b}, true
}

// replayArraysOf reads the optional routes and support arrays of a batch
// of n tokens (nil when absent).
func replayArraysOf(tb TrainBatch, n int, a *batchArrays) *ChildError {
	if t, ok := tb.Arrays["routes"]; ok {
		if err := t.CheckShape(Int32, int64(n), -1, -1); err != nil {
			return badField("arrays.routes", "%v", err)
		}
		a.routes, a.routeStride = t.Int32s(), int(t.Shape[1]*t.Shape[2])
		for i, v := range a.routes {
			if v < 0 {
				return badField("arrays.routes", "value %d at %d: expert ids are ≥ 0", v, i)
			}
		}
	}
	if t, ok := tb.Arrays["support"]; ok {
		if err := t.CheckShape(Int32, int64(n), -1); err != nil {
			return badField("arrays.support", "%v", err)
		}
		a.support, a.supportK = t.Int32s(), int(t.Shape[1])
	}
	return nil
}

// replayOf fills seq's Routes and Support from tokens [lo, hi) of a.
func replayOf(a *batchArrays, seq *model.Sequence, lo, hi int) {
	if a.routes != nil {
		seq.Routes = a.routes[lo*a.routeStride : hi*a.routeStride : hi*a.routeStride]
	}
	if a.support != nil {
		k := a.supportK
		seq.Support = make([][]int32, hi-lo)
		for i := range seq.Support {
			if seq.LossMask[i] == 0 {
				continue
			}
			for _, id := range a.support[(lo+i)*k : (lo+i+1)*k] {
				if id >= 0 {
					seq.Support[i] = append(seq.Support[i], id)
				}
			}
		}
	}
}
