package transformer

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/asyncrl/asyncrl/weights/quant"
	"github.com/asyncrl/asyncrl/weights/safetensors"
)

// QuantizationKey is the safetensors metadata entry naming a quantised
// checkpoint's scheme (model.QuantizationKey's spelling), read when
// config.json has no quantization_config.
const QuantizationKey = "quantization"

// Load reads a Hugging Face checkpoint directory: config.json (see
// ParseConfig), generation_config.json when present, and model.safetensors
// or the shards model.safetensors.index.json names. Every tensor the
// config implies must be there with its shape and a float dtype (F32,
// BF16, F16 — widened to float32 — or, in an FP8 or MXFP8 checkpoint
// whose config.json has quantization_config, F8_E4M3 codes with their
// weight_scale_inv / weight_scale, dequantised as vLLM would serve them).
// A tensor the config does not imply is refused too, except
// rotary_emb.inv_freq buffers of old exports, lm_head.weight of a tied
// model (HF ignores it) and DeepSeek's multi-token-prediction layers
// (model.layers.N for N ≥ num_hidden_layers, which transformers also skips).
// Errors name the file and the tensor; nothing is returned half-loaded.
func Load(dir string) (*Model, error) {
	c, err := ReadConfig(dir)
	if err != nil {
		return nil, err
	}
	gen, err := ReadGenerationConfig(dir, c.VocabSize)
	if err != nil {
		return nil, err
	}
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrCheckpoint, dir, err)
	}
	defer ck.Close()
	w := build(c)
	scheme, err := c.scheme(ck.Metadata())
	if err != nil {
		return nil, err
	}
	if err := checkNames(c, w, ck, scheme); err != nil {
		return nil, fmt.Errorf("%w (checkpoint %s)", err, dir)
	}
	for _, t := range w.tensors {
		if err := readTensor(ck, t, scheme); err != nil {
			return nil, fmt.Errorf("%w (checkpoint %s)", err, dir)
		}
	}
	return newModel(c, gen, w), nil
}

// scheme returns the quantisation scheme config.json (or the safetensors
// metadata) names, nil for none.
func (c *Config) scheme(md map[string]string) (quant.Scheme, error) {
	switch c.Quant {
	case "fp8":
		return quant.FP8Block{BlockRows: c.QuantBlock[0], BlockCols: c.QuantBlock[1]}, nil
	case "mxfp8":
		return quant.MXFP8{}, nil
	}
	if name := md[QuantizationKey]; name != "" {
		s, err := quant.Lookup(name)
		if err != nil {
			return nil, fmt.Errorf("%w: safetensors metadata %q: %w", ErrCheckpoint, QuantizationKey, err)
		}
		return s, nil
	}
	return nil, nil
}

var mtpLayer = regexp.MustCompile(`^model\.layers\.(\d+)\.`)

// checkNames refuses tensors the config does not imply.
func checkNames(c *Config, w *weights, ck *safetensors.Checkpoint, scheme quant.Scheme) error {
	want := make(map[string]bool, len(w.tensors))
	for _, t := range w.tensors {
		want[t.name] = true
		if scheme != nil && t.kind == kindProj {
			want[scheme.ScaleName(t.name)] = true
		}
	}
	for _, name := range ck.Names() {
		if want[name] || strings.HasSuffix(name, "rotary_emb.inv_freq") || (c.TieWordEmbeddings && name == "lm_head.weight") {
			continue
		}
		if m := mtpLayer.FindStringSubmatch(name); c.Arch == DeepseekV3 && m != nil {
			if n, _ := strconv.Atoi(m[1]); n >= c.NumHiddenLayers {
				continue // a next-token-prediction layer (_keys_to_ignore_on_load_unexpected)
			}
		}
		return fmt.Errorf("%w: unexpected tensor %q in %s (config.json: model_type %s, %d layers%s); remove it or fix config.json",
			ErrCheckpoint, name, ck.ShardOf(name), c.Arch, c.NumHiddenLayers, moeNote(c))
	}
	for _, t := range w.tensors {
		if ck.ShardOf(t.name) == "" {
			return fmt.Errorf("%w: tensor %q is missing from %s (config.json: model_type %s, %d layers%s)",
				ErrCheckpoint, t.name, indexName(ck), c.Arch, c.NumHiddenLayers, moeNote(c))
		}
	}
	return nil
}

func indexName(ck *safetensors.Checkpoint) string {
	if sh := ck.Shards(); len(sh) == 1 && sh[0] == safetensors.SingleFileName {
		return safetensors.SingleFileName
	}
	return safetensors.IndexFileName
}

func moeNote(c *Config) string {
	if !c.MoE() {
		return ""
	}
	return fmt.Sprintf(", %d experts", c.NumExperts)
}

// readTensor fills t from the checkpoint: a float tensor widened, or FP8
// codes dequantised with their scale.
func readTensor(ck *safetensors.Checkpoint, t tensor, scheme quant.Scheme) error {
	f, err := ck.File(t.name)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	info, err := f.Info(t.name)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	file := ck.ShardOf(t.name)
	want := make([]int64, len(t.shape))
	for i, s := range t.shape {
		want[i] = int64(s)
	}
	if !slices.Equal(info.Shape, want) {
		return fmt.Errorf("%w: tensor %q in %s has shape %v, config.json implies %v", ErrCheckpoint, t.name, file, info.Shape, want)
	}
	dst := *t.data
	switch info.DType {
	case safetensors.F32, safetensors.BF16, safetensors.F16:
		b, _, err := f.ReadTensor(t.name)
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrCheckpoint, file, err)
		}
		if _, err := safetensors.DecodeFloat32(info.DType, b, dst); err != nil {
			return fmt.Errorf("%w: tensor %q in %s: %w", ErrCheckpoint, t.name, file, err)
		}
		return nil
	case safetensors.F8E4M3:
		if scheme == nil || t.kind != kindProj || len(t.shape) != 2 {
			return fmt.Errorf("%w: tensor %q in %s is F8_E4M3 but config.json has no quantization_config for it; want a float dtype (F32, BF16, F16)",
				ErrCheckpoint, t.name, file)
		}
		return readQuantized(ck, t, scheme, dst)
	}
	return fmt.Errorf("%w: tensor %q in %s has dtype %s; want a float dtype (F32, BF16, F16, or F8_E4M3 with quantization_config)",
		ErrCheckpoint, t.name, file, info.DType)
}

func readQuantized(ck *safetensors.Checkpoint, t tensor, scheme quant.Scheme, dst []float32) error {
	file := ck.ShardOf(t.name)
	b, info, err := ck.ReadTensor(t.name)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrCheckpoint, file, err)
	}
	sname := scheme.ScaleName(t.name)
	if ck.ShardOf(sname) == "" {
		return fmt.Errorf("%w: tensor %q in %s is %s-quantised but its scale %q is missing", ErrCheckpoint, t.name, file, scheme.Name(), sname)
	}
	sb, sinfo, err := ck.ReadTensor(sname)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrCheckpoint, ck.ShardOf(sname), err)
	}
	wq := quant.Tensor{Name: t.name, DType: string(info.DType), Shape: info.Shape, Data: b}
	sq := quant.Tensor{Name: sname, DType: string(sinfo.DType), Shape: sinfo.Shape, Data: sb}
	got, err := scheme.Dequantize(wq, sq, dst[:0])
	if err != nil {
		return fmt.Errorf("%w: tensor %q in %s: %w", ErrCheckpoint, t.name, file, err)
	}
	if len(got) != len(dst) {
		return fmt.Errorf("%w: tensor %q in %s: dequantised %d values, want %d", ErrCheckpoint, t.name, file, len(got), len(dst))
	}
	if &got[0] != &dst[0] {
		copy(dst, got)
	}
	return nil
}
