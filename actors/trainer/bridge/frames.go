package bridge

import (
	"fmt"
	"math"
	"reflect"
)

var mapType = reflect.TypeOf(map[string]any(nil))

// Frame types.
const (
	TypeInit           = "Init"
	TypeReady          = "Ready"
	TypeTrainBatch     = "TrainBatch"
	TypeStepResult     = "StepResult"
	TypeSaveCheckpoint = "SaveCheckpoint"
	TypeSaved          = "Saved"
	TypeShutdown       = "Shutdown"
	TypeBye            = "Bye"
	TypeError          = "Error"
)

// Error codes of an Error frame.
const (
	CodeBadFrame           = "bad_frame"
	CodeBadField           = "bad_field"
	CodeUnsupportedVersion = "unsupported_version"
	CodeInternal           = "internal"
)

// Model names the initial weights.
type Model struct {
	// Kind is "builtin" (the built-in policy's layout) or "hf".
	Kind string `cbor:"kind"`
	// Path is an HF-layout directory: config.json + model.safetensors.
	Path string `cbor:"path"`
	// Config is config.json's content (kind builtin).
	Config map[string]any `cbor:"config,omitempty"`
	// LoRA (kind hf) trains a LoRA adapter instead of the weights: the
	// child then also returns the adapter of each step
	// (StepResult.Adapter). Optional field of frames v1; a child that does
	// not know it refuses the Init (bad_field model.lora).
	LoRA *LoRA `cbor:"lora,omitempty"`
}

// LoRA is a LoRA adapter to train, in PEFT's terms (LoraConfig).
type LoRA struct {
	// R is the rank, Alpha lora_alpha: the update is Alpha/R · B·A
	// (Alpha/√R with UseRSLoRA).
	R     int     `cbor:"r"`
	Alpha float64 `cbor:"alpha"`
	// TargetModules are module-name suffixes (PEFT's list form, e.g.
	// q_proj, down_proj) or ["all-linear"]: every attention and MLP
	// projection (experts' and shared experts' included).
	TargetModules []string `cbor:"target_modules"`
	UseRSLoRA     bool     `cbor:"use_rslora,omitempty"`
}

// Optimizer is AdamW's settings.
type Optimizer struct {
	Name string  `cbor:"name"`
	LR   float64 `cbor:"lr"`
	// WarmupSteps: step k uses lr·min(1, k/warmup_steps); 0 (absent) = none.
	WarmupSteps int        `cbor:"warmup_steps,omitempty"`
	Betas       [2]float64 `cbor:"betas"`
	Eps         float64    `cbor:"eps"`
	WeightDecay float64    `cbor:"weight_decay"`
	MaxGradNorm float64    `cbor:"max_grad_norm"`
}

// Init starts (or restarts) a child.
type Init struct {
	Header
	Model     Model          `cbor:"model"`
	Optimizer Optimizer      `cbor:"optimizer"`
	Loss      map[string]any `cbor:"loss"`
	Seed      int64          `cbor:"seed"`
	// Resume is a state directory of a StepResult (nil: start from Model.Path).
	Resume *string `cbor:"resume"`
	// Step is the version the weights are at (steps already done).
	Step   int64  `cbor:"step"`
	OutDir string `cbor:"out_dir"`
	// Group makes the child one rank of a data-parallel group (optional
	// field of frames v1; absent: a world of one). The Supervisor fills it
	// per rank when Options.Ranks > 1.
	Group *Group `cbor:"group,omitempty"`
}

// Group is Init.group: the rank's place in a torch.distributed group
// whose rendezvous the Go side owns (docs/protocol.md "Worker groups").
type Group struct {
	Rank      int `cbor:"rank"`
	WorldSize int `cbor:"world_size"`
	// Addr and Port are the rendezvous (rank 0 hosts torch's TCP store).
	Addr string `cbor:"addr"`
	Port int    `cbor:"port"`
	// TimeoutS bounds the rendezvous (and the group's collectives).
	TimeoutS float64 `cbor:"timeout_s"`
	// Backend is gloo, nccl, or "" (the child's choice: nccl when its
	// model is on CUDA, gloo otherwise).
	Backend string `cbor:"backend,omitempty"`
}

// TrainBatch is one mini-batch: one optimiser step that produces version Step.
type TrainBatch struct {
	Header
	Step   int64             `cbor:"step"`
	Arrays map[string]Tensor `cbor:"arrays"`
	Groups []string          `cbor:"groups"`
	// Microbatches is the plan (sequence indices, in order); nil: one
	// microbatch of every sequence.
	Microbatches [][]int `cbor:"microbatches,omitempty"`
	// MicrobatchRanks is the rank that trains each microbatch (optional
	// field of frames v1, required by a group of more than one rank: the
	// whole batch goes to every rank, each trains its own microbatches).
	MicrobatchRanks []int `cbor:"microbatch_ranks,omitempty"`
	// Loss is the step's objective: "" (absent: the Init's policy loss)
	// or LossCrossEntropy (SFT: the NLL of the loss-masked tokens; the
	// rollout_logprobs, versions, rewards and advantages arrays are then
	// optional and not read). Optional field of frames v1.
	Loss string `cbor:"loss,omitempty"`
}

// LossCrossEntropy is TrainBatch.Loss for supervised steps
// (model.LossCrossEntropy).
const LossCrossEntropy = "cross_entropy"

// SaveCheckpoint asks for the full resume state in Dir.
type SaveCheckpoint struct {
	Header
	Dir string `cbor:"dir"`
	// Serving asks for the BF16 serving checkpoint (StepResult.checkpoint's
	// layout) instead of the resume state. Optional field of frames v1
	// (Tinker's save_weights_for_sampler); a child that does not know it
	// answers Error{bad_field, field: "serving"}.
	Serving bool `cbor:"serving,omitempty"`
}

// Shutdown asks the child to answer Bye and exit 0.
type Shutdown struct{ Header }

// Reply is any child → Go frame; which fields are set depends on Type.
type Reply struct {
	Header
	Step    int64          `cbor:"step"`
	Worker  map[string]any `cbor:"worker,omitempty"`
	Metrics map[string]any `cbor:"metrics,omitempty"`
	// Rank is a StepResult's per-rank figures (rank, world_size, step_s,
	// allreduce_s, memory_bytes); optional.
	Rank       map[string]any `cbor:"rank,omitempty"`
	Checkpoint string         `cbor:"checkpoint,omitempty"`
	Adapter    string         `cbor:"adapter,omitempty"`
	State      string         `cbor:"state,omitempty"`
	Dir        string         `cbor:"dir,omitempty"`
	Code       string         `cbor:"code,omitempty"`
	Field      string         `cbor:"field,omitempty"`
	Message    string         `cbor:"message,omitempty"`
	// Loss and Arrays are a ForwardBackwardResult's.
	Loss   float64           `cbor:"loss,omitempty"`
	Arrays map[string]Tensor `cbor:"arrays,omitempty"`
}

// StepResult is a trained step as the Go side keeps it.
type StepResult struct {
	Step int64
	// Metrics are the child's numbers (loss, pg_loss, clip_frac, kl,
	// grad_norm, entropy, mismatch, tokens, …); keys a child does not
	// compute are absent.
	Metrics map[string]float64
	// Checkpoint is the serving checkpoint of version Step; State the
	// full resume state of it.
	Checkpoint, State string
	// Adapter is the step's LoRA adapter in PEFT's layout
	// (adapter_config.json + adapter_model.safetensors) when Init asked
	// for LoRA; Checkpoint then holds the merged weights. "" otherwise.
	Adapter string
	// Ranks are each rank's own figures (StepResult.rank: step_s,
	// allreduce_s, memory_bytes …), in rank order; one entry per rank
	// that reported them.
	Ranks []map[string]float64
}

func stepResult(r Reply) (StepResult, error) {
	if r.Checkpoint == "" || r.State == "" {
		return StepResult{}, fmt.Errorf("%w: StepResult for step %d without checkpoint or state", ErrProtocol, r.Step)
	}
	m := make(map[string]float64, len(r.Metrics))
	for k, v := range r.Metrics {
		if f, ok := number(v); ok {
			m[k] = f
		}
	}
	return StepResult{Step: r.Step, Metrics: m, Checkpoint: r.Checkpoint, State: r.State, Adapter: r.Adapter}, nil
}

// number reads a CBOR number decoded into any.
func number(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case float32:
		return float64(x), true
	case uint64:
		return float64(x), true
	case int64:
		return float64(x), true
	case int:
		return float64(x), true
	}
	return math.NaN(), false
}

// ChildError is the child's Error frame: nothing was applied, and (except
// after "internal" errors it cannot recover from) the child keeps serving.
type ChildError struct {
	Code, Field, Message string
}

func (e *ChildError) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("trainer child: %s: %s: %s", e.Code, e.Field, e.Message)
	}
	return fmt.Sprintf("trainer child: %s: %s", e.Code, e.Message)
}
