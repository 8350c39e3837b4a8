package bridgetrain

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/actors/trainer/bridge"
	"github.com/asyncrl/asyncrl/tinker"
)

// ErrState is wrapped by errors about a missing or foreign saved state.
var ErrState = errors.New("bridgetrain: bad saved state")

// stateFile is written next to the child's state: the optimiser step the
// state is at (Init.step must name it to resume with the optimiser).
const stateFile = "bridgetrain.json"

// Options configure the children of one server.
type Options struct {
	// Spec is the child's command (tinker.trainer_exec, trainer_exec_env).
	Spec bridge.Spec
	// Base is the base model's serving checkpoint directory (config.json +
	// model.safetensors): every model starts from it.
	Base string
	// Kind is Init's model kind: "builtin" (the default, the built-in
	// policy) or "hf" (a Hugging Face checkpoint of a native architecture:
	// the child reads its shape from Base's config.json).
	Kind string
	// Config is Base's config.json content, sent in Init with kind builtin
	// so a state of another shape is refused (kind hf refuses it: the
	// child reads config.json itself).
	Config map[string]any
	// OutDir holds one working directory per model.
	OutDir string
	// Timeout bounds each call (default 10 min), Restarts how often a
	// child that dies while starting is replaced (default 0).
	Timeout  time.Duration
	Restarts int
	Logger   zerolog.Logger
	// OnSent is bridge.Options.OnSent (tests kill a child mid-call there).
	OnSent func(typ string, pid int)
}

// Model is one Tinker model trained by a child process.
type Model struct {
	opts Options
	sup  *bridge.Supervisor
	init bridge.Init
}

// New starts a child for one model initialised from opts.Base.
func New(ctx context.Context, opts Options, name string, seed int64) (*Model, error) {
	if opts.Base == "" {
		return nil, fmt.Errorf("bridgetrain: no base checkpoint")
	}
	model := bridge.Model{Kind: "builtin", Path: opts.Base, Config: opts.Config}
	if opts.Kind == "hf" {
		model = bridge.Model{Kind: "hf", Path: opts.Base}
	}
	init := bridge.Init{
		Model: model,
		// OptimStep sets the AdamW parameters of every step; these only
		// make the child's optimiser.
		Optimizer: bridge.Optimizer{Name: "adamw", LR: 1e-4, Betas: [2]float64{0.9, 0.95}, Eps: 1e-8},
		Loss:      map[string]any{},
		Seed:      seed,
		OutDir:    filepath.Join(opts.OutDir, name),
	}
	sup, err := bridge.Start(ctx, bridge.Options{Spec: opts.Spec, Init: init, StepTimeout: opts.Timeout,
		Restarts: opts.Restarts, Logger: opts.Logger, OnSent: opts.OnSent})
	if err != nil {
		return nil, fmt.Errorf("bridgetrain: start %s: %w", opts.Spec, err)
	}
	return &Model{opts: opts, sup: sup, init: init}, nil
}

// Worker is the child's Ready.worker (name, protocol, torch version).
func (m *Model) Worker() map[string]any { return m.sup.Worker() }

// Close shuts the child down.
func (m *Model) Close() error { return m.sup.Close(context.Background()) }

func (m *Model) ctx() (context.Context, context.CancelFunc) {
	return context.WithCancel(context.Background())
}

// ForwardBackward runs in (validated by tinker.ValidateFwdBwd) in the child.
func (m *Model) ForwardBackward(in *tinker.ForwardBackwardInput, backward bool) (tinker.ForwardBackwardOutput, error) {
	// The server validated in (tinker.ValidateFwdBwd); what a loss needs is
	// the child's to check, so every per-token input present is sent.
	var toks, ids []int32
	off := []int64{0}
	f32 := map[string][]float32{}
	for di := range in.Data {
		d := &in.Data[di]
		t := d.ModelInput.Tokens()
		toks = append(toks, t...)
		off = append(off, int64(len(toks)))
		for k, x := range d.LossFnInputs {
			if len(x.Data) != len(t) {
				return tinker.ForwardBackwardOutput{}, fmt.Errorf("bridgetrain: datum %d: loss_fn_inputs.%s has %d values for %d tokens", di, k, len(x.Data), len(t))
			}
			if di > 0 && f32[k] == nil {
				return tinker.ForwardBackwardOutput{}, fmt.Errorf("bridgetrain: datum %d has loss_fn_inputs.%s, datum 0 does not", di, k)
			}
			if k == "target_tokens" {
				for _, v := range x.Data { // ids, exactly (float32 holds only 2^24)
					ids = append(ids, int32(v))
				}
				f32[k] = append(f32[k], make([]float32, len(x.Data))...) // length bookkeeping only
				continue
			}
			f32[k] = append(f32[k], f64to32(x.Data)...)
		}
		for k, v := range f32 {
			if len(v) != len(toks) {
				return tinker.ForwardBackwardOutput{}, fmt.Errorf("bridgetrain: datum %d lacks loss_fn_inputs.%s", di, k)
			}
		}
	}
	arrays := map[string]bridge.Tensor{"tokens": bridge.Int32Tensor(toks), "seq_offsets": bridge.Int64Tensor(off)}
	for k, v := range f32 {
		if k == "target_tokens" {
			arrays[k] = bridge.Int32Tensor(ids)
			continue
		}
		arrays[k] = bridge.Float32Tensor(v)
	}
	ctx, cancel := m.ctx()
	defer cancel()
	res, err := m.sup.ForwardBackward(ctx, &bridge.ForwardBackward{Loss: in.LossFn, LossConfig: in.LossFnConfig,
		Backward: backward, Arrays: arrays})
	if err != nil {
		return tinker.ForwardBackwardOutput{}, fmt.Errorf("bridgetrain: forward_backward: %w", err)
	}
	out := tinker.ForwardBackwardOutput{LossFnOutputType: "TensorData", Metrics: map[string]float64{"loss:sum": res.Loss}}
	for di := range in.Data {
		lo, hi := off[di], off[di+1]
		n := []int{int(hi - lo)}
		out.LossFnOutputs = append(out.LossFnOutputs, tinker.LossFnOutput{
			"logprobs":         {Data: f64(res.Logprobs[lo:hi]), DType: "float32", Shape: n},
			"elementwise_loss": {Data: f64(res.ElementwiseLoss[lo:hi]), DType: "float32", Shape: n},
		})
	}
	return out, nil
}

func f64to32(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}

func f64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// OptimStep applies the accumulated gradient with AdamW (p) and clears it.
func (m *Model) OptimStep(p tinker.AdamParams) (map[string]float64, error) {
	ctx, cancel := m.ctx()
	defer cancel()
	met, _, err := m.sup.OptimStep(ctx, &bridge.OptimStep{LR: p.LearningRate, Beta1: p.Beta1, Beta2: p.Beta2,
		Eps: p.Eps, WeightDecay: p.WeightDecay, GradClipNorm: p.GradClipNorm})
	if err != nil {
		return nil, fmt.Errorf("bridgetrain: optim_step: %w", err)
	}
	return met, nil
}

// SaveSampler writes the BF16 serving checkpoint into dir.
func (m *Model) SaveSampler(dir string) error {
	ctx, cancel := m.ctx()
	defer cancel()
	if err := m.sup.SaveServing(ctx, dir); err != nil {
		return fmt.Errorf("bridgetrain: save_weights_for_sampler: %w", err)
	}
	return nil
}

type stateMeta struct {
	Step int64 `json:"step"`
}

// SaveState writes the child's resume state into dir, then stateFile.
func (m *Model) SaveState(dir string) error {
	ctx, cancel := m.ctx()
	defer cancel()
	step, err := m.sup.SaveState(ctx, dir)
	if err != nil {
		return fmt.Errorf("bridgetrain: save_state: %w", err)
	}
	b, _ := json.Marshal(stateMeta{Step: step})
	if err := os.WriteFile(filepath.Join(dir, stateFile), b, 0o644); err != nil {
		return fmt.Errorf("bridgetrain: save_state: %w", err)
	}
	return nil
}

// LoadState restarts the child from a SaveState directory: with optimizer
// its weights, optimiser state and step; without, its weights and a fresh
// optimiser (as gotrain). The accumulated gradient is dropped.
func (m *Model) LoadState(dir string, optimizer bool) error {
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return fmt.Errorf("%w: %v (not a state this backend saved)", ErrState, err)
	}
	var meta stateMeta
	if err := json.Unmarshal(b, &meta); err != nil {
		return fmt.Errorf("%w: %s/%s: %v", ErrState, dir, stateFile, err)
	}
	init := m.init
	if optimizer {
		d := dir
		init.Resume, init.Step = &d, meta.Step
	} else {
		init.Model.Path, init.Resume, init.Step = dir, nil, 0
	}
	ctx, cancel := m.ctx()
	defer cancel()
	if err := m.sup.Reinit(ctx, init); err != nil {
		return fmt.Errorf("bridgetrain: load_state %s: %w", dir, err)
	}
	return nil
}

// Backend makes Models (the server's Backend with tinker.trainer exec).
type Backend struct {
	Opts Options
	// Vocab and MaxLen are the base model's limits; ArchName and Tokenizer
	// describe it (get_info).
	Vocab, MaxLen       int
	ArchName, Tokenizer string
}

// NewModel starts a child for a new model (its working directory is a
// fresh one under Opts.OutDir; the LoRA rank is not used: the child
// trains a full copy, as gotrain does).
func (b *Backend) NewModel(rank int, seed int64) (*Model, error) {
	if err := os.MkdirAll(b.Opts.OutDir, 0o755); err != nil {
		return nil, fmt.Errorf("bridgetrain: %w", err)
	}
	d, err := os.MkdirTemp(b.Opts.OutDir, "model-")
	if err != nil {
		return nil, fmt.Errorf("bridgetrain: %w", err)
	}
	return New(context.Background(), b.Opts, filepath.Base(d), seed)
}

// ReadConfig reads dir/config.json for Options.Config, integers as int64
// (the child checks them as integers).
func ReadConfig(dir string) (map[string]any, error) {
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("bridgetrain: base config: %w", err)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var raw map[string]any
	if err := d.Decode(&raw); err != nil {
		return nil, fmt.Errorf("bridgetrain: %s/config.json: %w", dir, err)
	}
	for k, v := range raw {
		if n, ok := v.(json.Number); ok {
			if i, err := n.Int64(); err == nil {
				raw[k] = i
			} else if f, err := n.Float64(); err == nil {
				raw[k] = f
			}
		}
	}
	return raw, nil
}
