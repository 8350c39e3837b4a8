package quantdir

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/asyncrl/asyncrl/weights/quant"
	"github.com/asyncrl/asyncrl/weights/safetensors"
)

// QuantizationKey is the safetensors metadata entry naming the scheme of a
// quantised checkpoint (the same key model.QuantizationKey writes), so a
// reader that gets the shards without config.json still knows.
const QuantizationKey = "quantization"

// LMHead is the output projection's module name, listed as unquantised in
// every quantization_config Quantize writes.
const LMHead = "lm_head"

// ErrQuantized is returned for a source that is already quantised.
var ErrQuantized = errors.New("quantdir: checkpoint is already quantised")

// Quantizable reports whether vLLM quantises the Hugging Face tensor name
// of that shape (package doc): a 2-D projection weight (…_proj.weight, and
// DeepSeek's kv_a_proj_with_mqa.weight).
func Quantizable(name string, shape []int64) bool {
	return len(shape) == 2 && (strings.HasSuffix(name, "_proj.weight") || strings.HasSuffix(name, "_proj_with_mqa.weight"))
}

// Quantize writes src's checkpoint quantised by s into dst (created; it
// must not exist or be empty) and returns the error of the served values
// against src's over the quantised tensors. On error dst may hold a
// partial copy; the caller removes it (a publisher writes into a fresh
// staging directory).
func Quantize(src, dst string, s quant.Scheme) (quant.Stats, error) {
	var st quant.Stats
	ck, err := safetensors.OpenDir(src)
	if err != nil {
		return st, fmt.Errorf("quantdir: %s: %w", src, err)
	}
	defer ck.Close()
	if ck.Metadata()[QuantizationKey] != "" {
		return st, fmt.Errorf("%w: %s (%s)", ErrQuantized, src, ck.Metadata()[QuantizationKey])
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return st, fmt.Errorf("quantdir: %w", err)
	}
	weightMap := map[string]string{}
	var total int64
	var kept []string
	for _, shard := range ck.Shards() {
		ts, sst, k, err := quantizeShard(ck, shard, s)
		if err != nil {
			return st, err
		}
		st.Merge(sst)
		kept = append(kept, k...)
		md := map[string]string{"format": "pt"}
		for k, v := range ck.Metadata() {
			md[k] = v
		}
		md[QuantizationKey] = s.Name()
		if err := safetensors.WriteFile(filepath.Join(dst, shard), ts, md); err != nil {
			return st, fmt.Errorf("quantdir: %s: %w", shard, err)
		}
		for _, t := range ts {
			weightMap[t.Name] = shard
			total += int64(len(t.Data))
		}
	}
	if len(ck.Shards()) > 1 || ck.Shards()[0] != safetensors.SingleFileName {
		if err := writeIndex(dst, weightMap, total); err != nil {
			return st, err
		}
	}
	if !slices.Contains(kept, LMHead) {
		// A tied model has no lm_head tensor, but vLLM may still build
		// one as ParallelLMHead with the checkpoint's quantisation (Llama
		// ties by sharing the embedding's weight), and ModelOpt quantises
		// every ParallelLMHead it is not told to skip
		// (ModelOptQuantConfigBase.get_quant_method, modelopt.py at
		// 00155cdecca722d98e34234c3d172725b7720b7d). lm_head is never
		// quantised here, so it is always listed.
		kept = append(kept, LMHead)
	}
	slices.Sort(kept)
	if err := copyOthers(src, dst, ck.Shards()); err != nil {
		return st, err
	}
	return st, writeConfig(src, dst, s.QuantizationConfig(kept))
}

// quantizeShard is one shard's tensors, quantised where Quantizable, and
// the modules of its kept 2-D weights (ignored_layers).
func quantizeShard(ck *safetensors.Checkpoint, shard string, s quant.Scheme) ([]safetensors.Tensor, quant.Stats, []string, error) {
	var st quant.Stats
	f, ok := ck.Shard(shard)
	if !ok {
		return nil, st, nil, fmt.Errorf("quantdir: no shard %s", shard)
	}
	var out []safetensors.Tensor
	var kept []string
	for _, info := range f.Tensors {
		if !Quantizable(info.Name, info.Shape) {
			b, _, err := f.ReadTensor(info.Name)
			if err != nil {
				return nil, st, nil, fmt.Errorf("quantdir: %s: %w", info.Name, err)
			}
			out = append(out, safetensors.Tensor{Name: info.Name, DType: info.DType, Shape: info.Shape, Data: b})
			if mod, ok := strings.CutSuffix(info.Name, ".weight"); ok && len(info.Shape) == 2 && !strings.HasSuffix(mod, "embed_tokens") {
				kept = append(kept, mod)
			}
			continue
		}
		vals, _, err := f.ReadFloat32(info.Name)
		if err != nil {
			return nil, st, nil, fmt.Errorf("quantdir: %s: %w", info.Name, err)
		}
		w, sc, tst, err := s.Quantize(info.Name, int(info.Shape[0]), int(info.Shape[1]), vals)
		if err != nil {
			return nil, st, nil, fmt.Errorf("quantdir: quantising %s: %w", info.Name, err)
		}
		st.Merge(tst)
		out = append(out, fromQuant(w), fromQuant(sc))
	}
	return out, st, kept, nil
}

func fromQuant(t quant.Tensor) safetensors.Tensor {
	return safetensors.Tensor{Name: t.Name, DType: safetensors.DType(t.DType), Shape: t.Shape, Data: t.Data}
}

func writeIndex(dst string, weightMap map[string]string, total int64) error {
	idx := safetensors.Index{WeightMap: weightMap}
	idx.Metadata.TotalSize = total
	js, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dst, safetensors.IndexFileName), append(js, '\n'), 0o644)
}

// copyOthers copies every regular file of src that is not a shard, the
// index or config.json into dst.
func copyOthers(src, dst string, shards []string) error {
	ents, err := os.ReadDir(src)
	if err != nil {
		return fmt.Errorf("quantdir: %w", err)
	}
	for _, e := range ents {
		n := e.Name()
		if !e.Type().IsRegular() || slices.Contains(shards, n) || n == safetensors.IndexFileName || n == "config.json" || strings.HasPrefix(n, ".") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, n))
		if err != nil {
			return fmt.Errorf("quantdir: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dst, n), b, 0o644); err != nil {
			return fmt.Errorf("quantdir: %w", err)
		}
	}
	return nil
}

// writeConfig copies src's config.json into dst with quantization_config
// set (every other key kept as it was, in its JSON form).
func writeConfig(src, dst string, qc map[string]any) error {
	js, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		return fmt.Errorf("quantdir: %w", err)
	}
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(js, &cfg); err != nil {
		return fmt.Errorf("quantdir: %s: %w", filepath.Join(src, "config.json"), err)
	}
	q, err := json.Marshal(qc)
	if err != nil {
		return err
	}
	cfg["quantization_config"] = q
	out, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dst, "config.json"), append(out, '\n'), 0o644)
}
