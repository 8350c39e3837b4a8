package transformer

import (
	"fmt"
	"slices"

	"github.com/asyncrl/asyncrl/weights/quant"
)

// Quants lists the quantisations Quantized knows (engines.quantize).
func Quants() []string { return []string{"none", "int4_g32", "int4_g128", "fp8", "mxfp8"} }

// Quantizable reports whether the tensor called name (of this model) is
// quantised by Quantized, by publish-time FP8/MXFP8 and by the trainer's
// INT4 fake quantisation: every Linear weight of attention (q/k/v/o,
// q_a/q_b, kv_a_proj_with_mqa, kv_b), the dense MLP, the experts and the
// shared experts. Never the embedding, lm_head, norms, router gates,
// e_score_correction_bias or biases: vLLM builds an MoE gate without the
// checkpoint's quantisation (vllm-project/vllm @002456df
// vllm/model_executor/models/qwen3_moe.py, Qwen3MoeSparseMoeBlock.gate =
// ReplicatedLinear(..., quant_config=None)), and FP8 checkpoints such as
// DeepSeek-V3's keep embeddings and lm_head in BF16.
func (m *Model) Quantizable(name string) bool {
	t, ok := m.w.byName(name)
	return ok && t.kind == kindProj
}

// QuantizedTensors lists the tensors Quantizable accepts, in order.
func (m *Model) QuantizedTensors() []string {
	var out []string
	for _, t := range m.w.tensors {
		if t.kind == kindProj {
			out = append(out, t.name)
		}
	}
	return out
}

// Quantized returns the copy of m an engine serving q computes with, as
// model.Model.Quantized does for the built-in policy: every tensor BF16
// (a loaded checkpoint's already are), then every quantizable [out, in]
// matrix quantised and dequantised — int4_g32 / int4_g128 with
// weights/quant.FakeQuantINT4 (symmetric, groups of 32/128 along the input
// dimension, BF16 scales), fp8 / mxfp8 with weights/quant's schemes. "none"
// gives m itself (it is immutable). m is not modified.
func (m *Model) Quantized(q string) (*Model, error) {
	if !slices.Contains(Quants(), q) {
		return nil, fmt.Errorf("%w: quantisation must be one of %v, got %q", ErrConfig, Quants(), q)
	}
	if q == "none" || q == "" {
		return m, nil
	}
	var scheme quant.Scheme
	group := 0
	switch q {
	case "int4_g32":
		group = 32
	case "int4_g128":
		group = 128
	default:
		s, err := quant.Lookup(q)
		if err != nil {
			return nil, err
		}
		scheme = s
	}
	c := m.cfg
	w := build(&c)
	for i, t := range w.tensors {
		src := *m.w.tensors[i].data
		dst := *t.data
		copy(dst, src)
		roundBF16(dst)
		if t.kind != kindProj {
			continue
		}
		rows, cols := t.shape[0], t.shape[1]
		if scheme == nil {
			if err := quant.FakeQuantINT4(dst, dst, rows, cols, group); err != nil {
				return nil, fmt.Errorf("transformer: quantising %s to %s: %w", t.name, q, err)
			}
			continue
		}
		qw, sc, _, err := scheme.Quantize(t.name, rows, cols, dst)
		if err == nil {
			var got []float32
			if got, err = scheme.Dequantize(qw, sc, dst[:0]); err == nil && len(got) == len(dst) {
				copy(dst, got)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("transformer: quantising %s to %s: %w", t.name, q, err)
		}
	}
	return newModel(&c, m.gen, w), nil
}
