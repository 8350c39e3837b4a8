package policy

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
// quantises t: the 2-D linear weights (layers.*.weight and head.weight;
// in a mixture of experts layers.*.router.weight). The embedding stays
// BF16 (a lookup table, not a matmul: FP8 checkpoints such as DeepSeek-V3
// keep embed_tokens unquantised) and so do the biases (added in full
// precision by every FP8 kernel) — by name, as a mixture's
// layers.*.experts.bias [Experts, Hidden] is 2-D. A mixture's
// layers.*.experts.weight is 3-D [Experts, Hidden, in] and stays BF16:
// quantising it per expert needs a 3-D scale layout the checkpoint
// readers (here and asyncrl_vllm.quant) do not have.
func quantizable(t tensor) bool {
	return len(t.shape) == 2 && strings.HasSuffix(t.name, ".weight") && t.name != "embed.weight"
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
		return st, fmt.Errorf("policy: %w", err)
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
		w, sc, tst, err := s.Quantize(t.name, t.shape[0], t.shape[1], vals)
		if err != nil {
			return st, fmt.Errorf("policy: quantising %s: %w", t.name, err)
		}
		st.Merge(tst)
		ts = append(ts, fromQuant(w), fromQuant(sc))
	}
	if _, err := safetensors.WriteSharded(dir, ts, 0, md); err != nil {
		return st, fmt.Errorf("policy: saving %s serving weights: %w", s.Name(), err)
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
		w, sc, tst, err := s.Quantize(t.name, t.shape[0], t.shape[1], vals)
		if err != nil {
			return nil, st, fmt.Errorf("policy: quantising %s: %w", t.name, err)
		}
		st.Merge(tst)
		if _, err := s.Dequantize(w, sc, vals[:0]); err != nil {
			return nil, st, fmt.Errorf("policy: dequantising %s: %w", t.name, err)
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
		if _, err := s.Dequantize(w, sc, dst[:0]); err != nil {
			return fmt.Errorf("%w: %s checkpoint: %w", ErrCheckpoint, s.Name(), err)
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
