// Package ckpttest makes random BF16 checkpoints and realistic updates of
// them for the weights packages' tests and benchmarks.
package ckpttest

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"

	"github.com/asyncrl/asyncrl/weights/safetensors"
)

// Random returns n BF16 tensors with assorted shapes totalling about
// totalBytes, values ~ N(0, 0.02) like an initialised LLM layer.
func Random(r *rand.Rand, n int, totalBytes int64) []safetensors.Tensor {
	per := max(totalBytes/int64(n)/2, 1) // elements per tensor on average
	var ts []safetensors.Tensor
	for i := range n {
		rows := int64(1 + r.IntN(16))
		cols := max(per*(50+int64(r.IntN(100)))/100/rows, 1)
		shape := []int64{rows, cols}
		if i%5 == 4 {
			shape = []int64{rows * cols} // a 1-D bias/norm
		}
		f := make([]float32, rows*cols)
		for j := range f {
			f[j] = float32(r.NormFloat64() * 0.02)
		}
		ts = append(ts, safetensors.Tensor{
			Name:  fmt.Sprintf("model.layers.%d.weight", i),
			DType: safetensors.BF16,
			Shape: shape,
			Data:  safetensors.EncodeBF16(f),
		})
	}
	return ts
}

// Update returns a copy of ts where a fraction density of each tensor's
// elements moved by a small relative step (an optimizer update: the BF16
// exponent rarely changes). Some tensors (every skipEvery-th, if > 0) are
// left unchanged, as frozen layers are.
func Update(r *rand.Rand, ts []safetensors.Tensor, density float64, skipEvery int) []safetensors.Tensor {
	out := make([]safetensors.Tensor, len(ts))
	for i, t := range ts {
		out[i] = t
		out[i].Data = slices.Clone(t.Data)
		if skipEvery > 0 && i%skipEvery == skipEvery-1 {
			continue
		}
		n := len(t.Data) / 2
		k := max(int(float64(n)*density), 1)
		for range k {
			j := r.IntN(n)
			h := uint16(out[i].Data[2*j]) | uint16(out[i].Data[2*j+1])<<8
			f := safetensors.Float32FromBF16(h)
			f += f*float32(r.NormFloat64()*0.05) + float32(r.NormFloat64()*1e-4)
			nh := safetensors.BF16FromFloat32(f)
			if nh == h {
				nh ^= 1 // make sure the element really changed
			}
			out[i].Data[2*j], out[i].Data[2*j+1] = byte(nh), byte(nh>>8)
		}
	}
	return out
}

// AdamLike returns a copy of ts where every element moved by a tiny
// relative step (lr·sign-like update): nearly all mantissas change but the
// exponents (high byte) barely do — the worst case for sparsity and the
// case XOR + zstd is built for.
func AdamLike(r *rand.Rand, ts []safetensors.Tensor, lr float64) []safetensors.Tensor {
	out := make([]safetensors.Tensor, len(ts))
	for i, t := range ts {
		out[i] = t
		f, _ := safetensors.DecodeFloat32(t.DType, t.Data, nil)
		for j := range f {
			step := float32(lr)
			if r.IntN(2) == 0 {
				step = -step
			}
			f[j] += step * float32(math.Max(math.Abs(float64(f[j])), 1e-3))
		}
		out[i].Data = safetensors.EncodeBF16(f)
	}
	return out
}

// Write writes ts into dir as a checkpoint, sharded at shardBytes.
func Write(dir string, ts []safetensors.Tensor, shardBytes int64) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	_, err := safetensors.WriteSharded(dir, ts, shardBytes, nil)
	return err
}

// SameDir reports the first difference between two checkpoint directories
// (file set and bytes), or "" when they are identical byte for byte.
func SameDir(a, b string) string {
	list := func(d string) []string {
		ents, _ := os.ReadDir(d)
		var ns []string
		for _, e := range ents {
			if e.Type().IsRegular() {
				ns = append(ns, e.Name())
			}
		}
		return ns
	}
	na, nb := list(a), list(b)
	if !slices.Equal(na, nb) {
		return fmt.Sprintf("files %v vs %v", na, nb)
	}
	for _, n := range na {
		x, _ := os.ReadFile(filepath.Join(a, n))
		y, _ := os.ReadFile(filepath.Join(b, n))
		if !bytes.Equal(x, y) {
			return fmt.Sprintf("%s differs", n)
		}
	}
	return ""
}
