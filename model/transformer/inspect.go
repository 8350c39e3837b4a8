package transformer

import (
	"fmt"
	"slices"
	"strings"

	"github.com/asyncrl/asyncrl/weights/safetensors"
)

// TensorInfo describes one stored tensor.
type TensorInfo struct {
	Name  string  `json:"name"`
	DType string  `json:"dtype"`
	Shape []int64 `json:"shape"`
	File  string  `json:"file"`
}

// Report is what Inspect finds in a checkpoint directory.
type Report struct {
	Dir           string `json:"dir"`
	ModelType     string `json:"model_type"`
	Architectures string `json:"architecture"`
	// Params counts the model's parameters (quantised weights once, their
	// scales not; a tied lm_head once).
	Params       int64        `json:"parameters"`
	Layers       int          `json:"layers"`
	Hidden       int          `json:"hidden_size"`
	Vocab        int          `json:"vocab_size"`
	MoELayers    []int        `json:"moe_layers,omitempty"`
	Experts      int          `json:"experts,omitempty"`
	TopK         int          `json:"experts_per_token,omitempty"`
	Quantization string       `json:"quantization"`
	Files        []string     `json:"files"`
	Tensors      []TensorInfo `json:"tensors"`
	// Valid is true when Load would accept the tensors (names, shapes,
	// dtypes); Problem says why not.
	Valid   bool   `json:"valid"`
	Problem string `json:"problem,omitempty"`
	// Can lists what asyncrl can do with the checkpoint.
	Can []string `json:"can"`
}

// Inspect reads dir's config.json and safetensors headers (no weights)
// and reports the architecture, parameter count, tensors, quantisation and
// what asyncrl can do with the checkpoint. An unsupported model_type or an
// unreadable checkpoint is an error; tensors that do not match the config
// are reported (Valid false, Problem) rather than refused, so a user can
// see what is wrong.
func Inspect(dir string) (*Report, error) {
	c, err := ReadConfig(dir)
	if err != nil {
		return nil, err
	}
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrCheckpoint, dir, err)
	}
	defer ck.Close()
	r := &Report{Dir: dir, ModelType: string(c.Arch), Architectures: architectures[c.Arch], Layers: c.NumHiddenLayers,
		Hidden: c.HiddenSize, Vocab: c.VocabSize, Quantization: "none (BF16/F16/F32)", Files: ck.Shards()}
	w := build(c)
	r.Params = w.numParams()
	for l := range c.NumHiddenLayers {
		if c.IsMoELayer(l) {
			r.MoELayers = append(r.MoELayers, l)
		}
	}
	if len(r.MoELayers) > 0 {
		r.Experts, r.TopK = c.NumExperts, c.NumExpertsPerTok
	}
	scheme, err := c.scheme(ck.Metadata())
	if err != nil {
		return nil, err
	}
	if scheme != nil {
		r.Quantization = scheme.Name() + " (dequantised on load)"
		if c.Quant == "fp8" {
			r.Quantization = fmt.Sprintf("fp8 block-wise %dx%d (dequantised on load)", c.QuantBlock[0], c.QuantBlock[1])
		}
	}
	for _, name := range ck.Names() {
		f, err := ck.File(name)
		if err != nil {
			return nil, err
		}
		info, err := f.Info(name)
		if err != nil {
			return nil, err
		}
		r.Tensors = append(r.Tensors, TensorInfo{Name: name, DType: string(info.DType), Shape: info.Shape, File: ck.ShardOf(name)})
	}
	order := make(map[string]int, len(w.tensors))
	for i, t := range w.tensors {
		order[t.name] = i
	}
	rank := func(name string) int {
		for _, suf := range []string{"", "_scale_inv", "_scale"} {
			if i, ok := order[strings.TrimSuffix(name, suf)]; ok && (suf == "" || strings.HasSuffix(name, suf)) {
				return i
			}
		}
		return len(w.tensors)
	}
	slices.SortStableFunc(r.Tensors, func(a, b TensorInfo) int { return rank(a.Name) - rank(b.Name) })
	r.Valid = true
	if err := checkNames(c, w, ck, scheme); err != nil {
		r.Valid, r.Problem = false, err.Error()
	} else {
		for _, t := range w.tensors {
			if err := checkHeader(ck, t, scheme); err != nil {
				r.Valid, r.Problem = false, err.Error()
				break
			}
		}
	}
	r.Can = capabilities(c, r.Valid)
	return r, nil
}

// checkHeader is readTensor's shape and dtype checks without the data.
func checkHeader(ck *safetensors.Checkpoint, t tensor, scheme interface{ ScaleName(string) string }) error {
	f, err := ck.File(t.name)
	if err != nil {
		return err
	}
	info, err := f.Info(t.name)
	if err != nil {
		return err
	}
	want := make([]int64, len(t.shape))
	for i, s := range t.shape {
		want[i] = int64(s)
	}
	file := ck.ShardOf(t.name)
	if !slices.Equal(info.Shape, want) {
		return fmt.Errorf("%w: tensor %q in %s has shape %v, config.json implies %v", ErrCheckpoint, t.name, file, info.Shape, want)
	}
	switch info.DType {
	case safetensors.F32, safetensors.BF16, safetensors.F16:
		return nil
	case safetensors.F8E4M3:
		if scheme != nil && t.kind == kindProj {
			if ck.ShardOf(scheme.ScaleName(t.name)) == "" {
				return fmt.Errorf("%w: tensor %q in %s is quantised but its scale %q is missing", ErrCheckpoint, t.name, file, scheme.ScaleName(t.name))
			}
			return nil
		}
	}
	return fmt.Errorf("%w: tensor %q in %s has dtype %s; want a float dtype (F32, BF16, F16, or F8_E4M3 with quantization_config)", ErrCheckpoint, t.name, file, info.DType)
}

func capabilities(c *Config, valid bool) []string {
	if !valid {
		return []string{"nothing until the problem is fixed: the engine refuses the checkpoint at load"}
	}
	out := []string{
		"serve in the built-in engine: asyncrl engine --weights DIR (vLLM HTTP API, KV cache, batched decode on CPU); /update_weights and the asyncrl_vllm RPCs load it too",
		"serve in vLLM: vllm serve DIR (the asyncrl_vllm worker extension for weight updates)",
		"train with the PyTorch worker (integrations/torch) through the worker bridge",
		"quantise on publish (publisher.quantize fp8 | mxfp8: the attention, MLP and expert projections; embeddings, lm_head, norms, routers and biases stay BF16) and serve quantised (engines.quantize int4_g32 | int4_g128 | fp8 | mxfp8)",
	}
	if c.MoE() {
		var moe []int
		for l := range c.NumHiddenLayers {
			if c.IsMoELayer(l) {
				moe = append(moe, l)
			}
		}
		out = append(out, fmt.Sprintf("R3 routing replay: return_routed_experts rows [tokens, %d layers, top-%d] over %d experts (every decoder layer, as vLLM; expert layers %v, dense layers' rows 0) — rollout.routed_experts {layers: %d, top_k: %d, num_experts: %d}",
			c.NumHiddenLayers, c.NumExpertsPerTok, c.NumExperts, moe, c.NumHiddenLayers, c.NumExpertsPerTok, c.NumExperts))
	}
	return out
}
