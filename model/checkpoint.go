package model

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/asyncrl/asyncrl/weights/safetensors"
)

// ErrCheckpoint is wrapped by checkpoint loading errors.
var ErrCheckpoint = errors.New("model: bad checkpoint")

// ConfigFileName holds the model Config (JSON) next to the weights.
const ConfigFileName = "config.json"

// TrainerFileName holds FP32 master weights, Adam moments, step and RNG.
const TrainerFileName = "trainer.safetensors"

// ModelType identifies the built-in policy's architecture in config.json's
// model_type; a serving checkpoint of any other model_type is a Hugging
// Face architecture (model/transformer).
const ModelType = "asyncrl-window-mlp"

const modelType = ModelType

// ReadModelType is config.json's model_type in dir.
func ReadModelType(dir string) (string, error) {
	js, err := os.ReadFile(filepath.Join(dir, ConfigFileName))
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	var cf struct {
		ModelType string `json:"model_type"`
	}
	if err := json.Unmarshal(js, &cf); err != nil {
		return "", fmt.Errorf("%w: %s: %v", ErrCheckpoint, filepath.Join(dir, ConfigFileName), err)
	}
	if cf.ModelType == "" {
		return "", fmt.Errorf("%w: %s: no model_type", ErrCheckpoint, filepath.Join(dir, ConfigFileName))
	}
	return cf.ModelType, nil
}

type configFile struct {
	ModelType string `json:"model_type"`
	Config
	TorchDType string `json:"torch_dtype"`
	// QuantizationConfig is Hugging Face's quantization_config of a
	// quantised serving checkpoint (SaveServingQuantized), what vLLM reads
	// to pick its FP8/MXFP8 linear method.
	QuantizationConfig map[string]any `json:"quantization_config,omitempty"`
}

func writeConfig(dir string, cfg Config, dtype string) error {
	return writeConfigFile(dir, configFile{ModelType: modelType, Config: cfg, TorchDType: dtype})
}

func writeConfigFile(dir string, cf configFile) error {
	js, err := json.MarshalIndent(cf, "", "  ")
	if err != nil {
		return err
	}
	// temp + rename: a reader never sees a half-written config.
	tmp, err := os.CreateTemp(dir, "."+ConfigFileName+".tmp-*")
	if err != nil {
		return fmt.Errorf("model: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(js, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("model: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("model: %w", err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("model: %w", err)
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, ConfigFileName))
}

func readConfig(dir string) (Config, error) {
	js, err := os.ReadFile(filepath.Join(dir, ConfigFileName))
	if err != nil {
		return Config{}, fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	var cf configFile
	if err := json.Unmarshal(js, &cf); err != nil {
		return Config{}, fmt.Errorf("%w: %s: %v", ErrCheckpoint, ConfigFileName, err)
	}
	if cf.ModelType != modelType {
		return Config{}, fmt.Errorf("%w: %s: model_type %q, want %q", ErrCheckpoint, ConfigFileName, cf.ModelType, modelType)
	}
	if err := cf.Config.Validate(); err != nil {
		return Config{}, fmt.Errorf("%w: %s: %w", ErrCheckpoint, ConfigFileName, err)
	}
	return cf.Config, nil
}

// TensorNames lists the parameter tensors in their fixed order.
func (m *Model) TensorNames() []string {
	out := make([]string, len(m.tensors))
	for i, t := range m.tensors {
		out[i] = t.name
	}
	return out
}

func (m *Model) tensorsAs(prefix string, dtype safetensors.DType, src []float32) []safetensors.Tensor {
	out := make([]safetensors.Tensor, 0, len(m.tensors))
	for _, t := range m.tensors {
		shape := make([]int64, len(t.shape))
		for i, s := range t.shape {
			shape[i] = int64(s)
		}
		vals := src[t.off : t.off+t.n]
		var data []byte
		if dtype == safetensors.BF16 {
			data = safetensors.EncodeBF16(vals)
		} else {
			data = safetensors.EncodeF32(vals)
		}
		out = append(out, safetensors.Tensor{Name: prefix + t.name, DType: dtype, Shape: shape, Data: data})
	}
	return out
}

// SaveServing writes the weights as a BF16 model.safetensors plus
// config.json into dir (created if needed): what an engine loads.
func (m *Model) SaveServing(dir string) error {
	return m.SaveServingSharded(dir, 0, nil)
}

// SaveServingSharded is SaveServing with sharding (maxShardBytes > 0 splits
// into model-0000i-of-0000N.safetensors plus an index) and extra
// safetensors metadata (e.g. the policy version).
func (m *Model) SaveServingSharded(dir string, maxShardBytes int64, metadata map[string]string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("model: %w", err)
	}
	md := map[string]string{"format": "pt"}
	for k, v := range metadata {
		md[k] = v
	}
	if _, err := safetensors.WriteSharded(dir, m.tensorsAs("", safetensors.BF16, m.params), maxShardBytes, md); err != nil {
		return fmt.Errorf("model: saving serving weights: %w", err)
	}
	return writeConfig(dir, m.cfg, "bfloat16")
}

// LoadServing loads a model saved by SaveServing (or any checkpoint with the
// same tensor names in F32/BF16/F16). From a BF16 file the weights are
// exactly the BF16-rounded master weights; from a SaveServingQuantized
// one they are the dequantised FP8/MXFP8 values (code · scale), exactly
// what an FP8 engine computes with.
func LoadServing(dir string) (*Model, error) {
	cfg, err := readConfig(dir)
	if err != nil {
		return nil, err
	}
	m, err := newZero(cfg)
	if err != nil {
		return nil, err
	}
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	defer ck.Close()
	if err := m.readServing(ck, ck.Metadata()); err != nil {
		return nil, err
	}
	m.refresh()
	return m, nil
}

// LoadServingFrom loads the weights of a single-file serving checkpoint
// (SaveServing's model.safetensors) held in src, size bytes long — bytes
// that arrived over a data plane, not a directory. cfg is the model
// configuration (config.json is not part of the bytes); the tensors must
// match it by name and shape, as in LoadServing.
func LoadServingFrom(cfg Config, src io.ReaderAt, size int64) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	m, err := newZero(cfg)
	if err != nil {
		return nil, err
	}
	f, err := safetensors.NewReader(src, size)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	defer f.Close()
	if err := m.readServing(f, f.Metadata); err != nil {
		return nil, err
	}
	m.refresh()
	return m, nil
}

type tensorSource interface {
	ReadFloat32(name string) ([]float32, safetensors.TensorInfo, error)
}

func (m *Model) readTensors(src tensorSource, prefix string, dst []float32) error {
	for _, t := range m.tensors {
		vals, info, err := src.ReadFloat32(prefix + t.name)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrCheckpoint, err)
		}
		want := make([]int64, len(t.shape))
		for i, s := range t.shape {
			want[i] = int64(s)
		}
		if !slices.Equal(info.Shape, want) {
			return fmt.Errorf("%w: tensor %q has shape %v, config implies %v", ErrCheckpoint, prefix+t.name, info.Shape, want)
		}
		copy(dst[t.off:t.off+t.n], vals)
	}
	return nil
}

// SaveTrainer writes everything needed to resume training bit-identically:
// FP32 master weights ("model.*"), Adam moments ("adam.m.*", "adam.v.*"),
// and in the safetensors metadata the step, the RNG state and the trainer
// config; plus config.json.
func (t *Trainer) SaveTrainer(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("model: %w", err)
	}
	rngState, err := t.pcg.MarshalBinary()
	if err != nil {
		return fmt.Errorf("model: %w", err)
	}
	cfgJS, err := json.Marshal(t.cfg)
	if err != nil {
		return fmt.Errorf("model: %w", err)
	}
	m := t.model
	ts := m.tensorsAs("model.", safetensors.F32, t.masterParams())
	ts = append(ts, m.tensorsAs("adam.m.", safetensors.F32, t.m)...)
	ts = append(ts, m.tensorsAs("adam.v.", safetensors.F32, t.v)...)
	md := map[string]string{
		"step":           strconv.FormatInt(t.step, 10),
		"rng":            base64.StdEncoding.EncodeToString(rngState),
		"trainer_config": string(cfgJS),
	}
	if err := safetensors.WriteFile(filepath.Join(dir, TrainerFileName), ts, md); err != nil {
		return fmt.Errorf("model: saving trainer: %w", err)
	}
	return writeConfig(dir, m.cfg, "float32")
}

// LoadTrainer restores a Trainer saved by SaveTrainer.
func LoadTrainer(dir string) (*Trainer, error) {
	mcfg, err := readConfig(dir)
	if err != nil {
		return nil, err
	}
	f, err := safetensors.Open(filepath.Join(dir, TrainerFileName))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	defer f.Close()
	var tcfg TrainerConfig
	if err := json.Unmarshal([]byte(f.Metadata["trainer_config"]), &tcfg); err != nil {
		return nil, fmt.Errorf("%w: trainer_config metadata: %v", ErrCheckpoint, err)
	}
	step, err := strconv.ParseInt(f.Metadata["step"], 10, 64)
	if err != nil || step < 0 {
		return nil, fmt.Errorf("%w: step metadata %q", ErrCheckpoint, f.Metadata["step"])
	}
	rngState, err := base64.StdEncoding.DecodeString(f.Metadata["rng"])
	if err != nil {
		return nil, fmt.Errorf("%w: rng metadata: %v", ErrCheckpoint, err)
	}
	m, err := newZero(mcfg)
	if err != nil {
		return nil, err
	}
	t, err := NewTrainer(m, tcfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	if err := t.pcg.UnmarshalBinary(rngState); err != nil {
		return nil, fmt.Errorf("%w: rng state: %v", ErrCheckpoint, err)
	}
	t.rng = rand.New(t.pcg)
	t.step = step
	for _, part := range []struct {
		prefix string
		dst    []float32
	}{{"model.", m.params}, {"adam.m.", t.m}, {"adam.v.", t.v}} {
		if err := m.readTensors(f, part.prefix, part.dst); err != nil {
			return nil, err
		}
	}
	m.refresh()
	return t, nil
}
