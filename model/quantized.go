package model

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/asyncrl/asyncrl/weights/quant"
	"github.com/asyncrl/asyncrl/weights/safetensors"
)

// QuantizationKey is the safetensors metadata entry that names the scheme
// of a quantised serving checkpoint ("fp8", "mxfp8"); LoadServing
// dequantises by it, so a checkpoint that arrives without its config.json
// (over a data plane) still loads.
const QuantizationKey = "quantization"

// quantizable reports whether SaveServingQuantized (and Quantized)
// quantises t: the Linear weights — layers.*.weight, head.weight and a
// mixture's layers.*.experts.weight, each expert's [Hidden, in] matrix on
// its own (matrices). The embedding stays BF16 (a lookup table, not a
// matmul: FP8 checkpoints such as DeepSeek-V3 keep embed_tokens
// unquantised), so do the biases (added in full precision by every FP8
// kernel; by name, as a mixture's experts.bias [Experts, Hidden] is 2-D)
// and a mixture's router.weight: vLLM builds an MoE's gate without the
// checkpoint's quantisation method (vllm-project/vllm
// vllm/model_executor/models/mixtral.py, MixtralMoE.gate), so the
// routing is computed in full precision.
func quantizable(t tensor) bool {
	switch {
	case t.name == "embed.weight", !strings.HasSuffix(t.name, ".weight"), strings.HasSuffix(t.name, ".router.weight"):
		return false
	}
	return len(t.shape) == 2 || len(t.shape) == 3
}

// matrices reports the weight matrices a quantizable t holds: one
// [rows, cols], or a mixture's experts.weight [Experts, Hidden, in] as
// Experts matrices [Hidden, in], quantised one by one (per-expert blocks
// and scales, as vLLM's fused-MoE weights: a 128×128 FP8 block never spans
// two experts).
func (t tensor) matrices() (n, rows, cols int) {
	if len(t.shape) == 3 {
		return t.shape[0], t.shape[1], t.shape[2]
	}
	return 1, t.shape[0], t.shape[1]
}

// quantizeTensor quantises the values of a quantizable t with s: a 2-D
// tensor as Quantize does; a 3-D one matrix by matrix, the codes and the
// scales of its n matrices stacked along a leading n dimension
// ([n, Hidden, in] codes, [n, …scale shape] scales).
func quantizeTensor(s quant.Scheme, t tensor, vals []float32) (w, sc quant.Tensor, st quant.Stats, err error) {
	n, rows, cols := t.matrices()
	if len(t.shape) == 2 {
		return s.Quantize(t.name, rows, cols, vals)
	}
	for e := range n {
		we, se, est, err := s.Quantize(t.name, rows, cols, vals[e*rows*cols:(e+1)*rows*cols])
		if err != nil {
			return w, sc, st, fmt.Errorf("expert %d: %w", e, err)
		}
		st.Merge(est)
		if e == 0 {
			w, sc = we, se
			w.Shape = append([]int64{int64(n)}, we.Shape...)
			sc.Shape = append([]int64{int64(n)}, se.Shape...)
			w.Data = make([]byte, 0, n*len(we.Data))
			sc.Data = make([]byte, 0, n*len(se.Data))
		}
		w.Data = append(w.Data, we.Data...)
		sc.Data = append(sc.Data, se.Data...)
	}
	return w, sc, st, nil
}

// dequantizeTensor writes into out (t.n values) what quantizeTensor's w
// and sc dequantise to.
func dequantizeTensor(s quant.Scheme, t tensor, w, sc quant.Tensor, out []float32) error {
	n, rows, cols := t.matrices()
	if len(t.shape) == 2 {
		got, err := s.Dequantize(w, sc, out[:0])
		if err == nil && len(got) != len(out) {
			err = fmt.Errorf("%d values, want %d", len(got), len(out))
		}
		if err == nil {
			copy(out, got)
		}
		return err
	}
	if len(w.Shape) != 3 || w.Shape[0] != int64(n) || len(sc.Shape) < 2 || sc.Shape[0] != int64(n) ||
		len(w.Data)%n != 0 || len(sc.Data)%n != 0 {
		return fmt.Errorf("codes %v and scales %v are not %d stacked expert matrices", w.Shape, sc.Shape, n)
	}
	wb, sb, rc := len(w.Data)/n, len(sc.Data)/n, rows*cols
	for e := range n {
		we := quant.Tensor{Name: w.Name, DType: w.DType, Shape: w.Shape[1:], Data: w.Data[e*wb : (e+1)*wb]}
		se := quant.Tensor{Name: sc.Name, DType: sc.DType, Shape: sc.Shape[1:], Data: sc.Data[e*sb : (e+1)*sb]}
		got, err := s.Dequantize(we, se, out[e*rc:e*rc])
		if err == nil && len(got) != rc {
			err = fmt.Errorf("%d values, want %d", len(got), rc)
		}
		if err != nil {
			return fmt.Errorf("expert %d: %w", e, err)
		}
		copy(out[e*rc:], got)
	}
	return nil
}

// QuantizedTensors lists the tensors SaveServingQuantized quantises.
func (m *Model) QuantizedTensors() []string {
	var out []string
	for _, t := range m.tensors {
		if quantizable(t) {
			out = append(out, t.name)
		}
	}
	return out
}

// SaveServingQuantized writes the serving checkpoint with its linear
// weights quantised by s straight from the float32 weights (each weight
// in s's dtype plus its scale tensor, everything else BF16), metadata and
// QuantizationKey in the safetensors metadata, and config.json with s's
// quantization_config. It returns the error of the served values against
// m's weights over the quantised tensors.
func (m *Model) SaveServingQuantized(dir string, s quant.Scheme, metadata map[string]string) (quant.Stats, error) {
	var st quant.Stats
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return st, fmt.Errorf("model: %w", err)
	}
	md := map[string]string{"format": "pt"}
	maps.Copy(md, metadata)
	md[QuantizationKey] = s.Name()
	var ts []safetensors.Tensor
	var kept []string // modules that stay unquantised
	for _, t := range m.tensors {
		vals := m.params[t.off : t.off+t.n]
		shape := int64s(t.shape)
		if !quantizable(t) {
			ts = append(ts, safetensors.Tensor{Name: t.name, DType: safetensors.BF16, Shape: shape, Data: safetensors.EncodeBF16(vals)})
			if mod, ok := strings.CutSuffix(t.name, ".weight"); ok {
				kept = append(kept, mod)
			}
			continue
		}
		w, sc, tst, err := quantizeTensor(s, t, vals)
		if err != nil {
			return st, fmt.Errorf("model: quantising %s: %w", t.name, err)
		}
		st.Merge(tst)
		ts = append(ts, fromQuant(w), fromQuant(sc))
	}
	if _, err := safetensors.WriteSharded(dir, ts, 0, md); err != nil {
		return st, fmt.Errorf("model: saving %s serving weights: %w", s.Name(), err)
	}
	cf := configFile{ModelType: modelType, Config: m.cfg, TorchDType: "bfloat16", QuantizationConfig: s.QuantizationConfig(kept)}
	return st, writeConfigFile(dir, cf)
}

// QuantizedCopy is the model an engine serves from SaveServingQuantized's
// checkpoint, built in memory: every quantised weight replaced by its
// dequantised values, the rest rounded to BF16; and the error against m.
func (m *Model) QuantizedCopy(s quant.Scheme) (*Model, quant.Stats, error) {
	c := m.Clone()
	var st quant.Stats
	for _, t := range c.tensors {
		vals := c.params[t.off : t.off+t.n]
		if !quantizable(t) {
			for i, v := range vals {
				vals[i] = roundBF16(v)
			}
			continue
		}
		w, sc, tst, err := quantizeTensor(s, t, vals)
		if err != nil {
			return nil, st, fmt.Errorf("model: quantising %s: %w", t.name, err)
		}
		st.Merge(tst)
		if err := dequantizeTensor(s, t, w, sc, vals); err != nil {
			return nil, st, fmt.Errorf("model: dequantising %s: %w", t.name, err)
		}
	}
	c.refresh()
	return c, st, nil
}

type rawSource interface {
	tensorSource
	ReadTensor(name string) ([]byte, safetensors.TensorInfo, error)
}

// readServing reads a serving checkpoint's weights: plain float tensors,
// or, when md names a quantisation scheme, the linear weights dequantised
// from their codes and scales.
func (m *Model) readServing(src rawSource, md map[string]string) error {
	name := md[QuantizationKey]
	if name == "" {
		return m.readTensors(src, "", m.params)
	}
	s, err := quant.Lookup(name)
	if err != nil {
		return fmt.Errorf("%w: metadata %s: %w", ErrCheckpoint, QuantizationKey, err)
	}
	for _, t := range m.tensors {
		dst := m.params[t.off : t.off+t.n]
		if !quantizable(t) {
			vals, info, err := src.ReadFloat32(t.name)
			if err != nil {
				return fmt.Errorf("%w: %w", ErrCheckpoint, err)
			}
			if !slices.Equal(info.Shape, int64s(t.shape)) {
				return fmt.Errorf("%w: tensor %q has shape %v, config implies %v", ErrCheckpoint, t.name, info.Shape, t.shape)
			}
			copy(dst, vals)
			continue
		}
		w, err := readQuant(src, t.name)
		if err != nil {
			return err
		}
		if !slices.Equal(w.Shape, int64s(t.shape)) {
			return fmt.Errorf("%w: tensor %q has shape %v, config implies %v", ErrCheckpoint, t.name, w.Shape, t.shape)
		}
		sc, err := readQuant(src, s.ScaleName(t.name))
		if err != nil {
			return err
		}
		if err := dequantizeTensor(s, t, w, sc, dst); err != nil {
			return fmt.Errorf("%w: %s checkpoint: %s: %w", ErrCheckpoint, s.Name(), t.name, err)
		}
	}
	return nil
}

func readQuant(src rawSource, name string) (quant.Tensor, error) {
	b, info, err := src.ReadTensor(name)
	if err != nil {
		return quant.Tensor{}, fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	return quant.Tensor{Name: name, DType: string(info.DType), Shape: info.Shape, Data: b}, nil
}

func fromQuant(t quant.Tensor) safetensors.Tensor {
	return safetensors.Tensor{Name: t.Name, DType: safetensors.DType(t.DType), Shape: t.Shape, Data: t.Data}
}

func int64s(xs []int) []int64 {
	out := make([]int64, len(xs))
	for i, x := range xs {
		out[i] = int64(x)
	}
	return out
}
