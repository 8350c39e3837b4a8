package wiring

import (
	"fmt"
	"runtime"
	"time"

	"github.com/asyncrl/asyncrl/actors/publisher/tracker"
	"github.com/asyncrl/asyncrl/actors/rollout"
	"github.com/asyncrl/asyncrl/actors/router/policy"
	"github.com/asyncrl/asyncrl/actors/router/proxy"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/engine"
	pmodel "github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/model/hftokenizer"
	"github.com/asyncrl/asyncrl/model/transformer"
)

// EngineConfig maps the engines section onto one built-in engine's config.
// name is the served model name (distinct per engine when several share a
// metrics registry); seed seeds the engine's sampling.
func EngineConfig(c config.EnginesConfig, name string, seed uint64) engine.Config {
	e := engine.DefaultConfig()
	if name != "" {
		e.ServedModelName = name
	}
	e.MaxModelLen = c.MaxModelLen
	e.Seed = seed
	e.TimeScale = c.TimeScale
	e.Latency.MaxNumSeqs = c.MaxNumSeqs
	e.Latency.MaxWaiting = c.MaxWaiting
	e.Latency.BlockSize = c.BlockSize
	e.Latency.CacheBlocks = c.PrefixCacheBlocks
	e.Latency.PrefillPerToken = micros(c.PrefillUSPerToken)
	e.Latency.DecodeBase = micros(c.DecodeUSPerToken)
	e.Latency.DecodePerSeq = micros(c.DecodeBatchSlope)
	return e
}

func micros(us float64) time.Duration { return time.Duration(us * float64(time.Microsecond)) }

// LoadPolicy loads a serving checkpoint as an engine model, by
// config.json's model_type: the built-in policy's ("asyncrl-window-mlp")
// with model.LoadServing, a Hugging Face checkpoint of a supported
// architecture (qwen3, qwen3_moe, llama, deepseek_v3) with
// transformer.Load. It is the engine's ModelLoader for /update_weights,
// the vLLM extension's checkpoint and delta loads, and LoRA paths that
// are whole models (a PEFT adapter directory goes to LoadAdapter).
func LoadPolicy(dir string) (engine.Model, error) {
	if mt, err := transformer.ModelType(dir); err == nil && transformer.Supported(mt) {
		m, err := transformer.Load(dir)
		if err != nil {
			return nil, err
		}
		return m, nil
	}
	m, err := pmodel.LoadServing(dir)
	if err != nil {
		return nil, err // a nil *Model must not become a non-nil interface
	}
	return m, nil
}

// LoadAdapter reads a LoRA adapter in PEFT's layout (adapter_config.json +
// adapter_model.safetensors) for the engine's AdapterLoader: it applies
// onto a served Hugging Face model (model/transformer), merging the
// adapted projections (transformer.Adapter.Apply); any other served model
// refuses it.
func LoadAdapter(dir string) (engine.Adapter, error) {
	a, err := transformer.ReadAdapter(dir)
	if err != nil {
		return nil, err
	}
	return hfAdapter{a}, nil
}

type hfAdapter struct{ a *transformer.Adapter }

func (h hfAdapter) Apply(base engine.Model) (engine.Model, error) {
	tm, ok := base.(*transformer.Model)
	if !ok {
		return nil, fmt.Errorf("the PEFT adapter %s applies to a Hugging Face model (qwen3, qwen3_moe, llama, deepseek_v3); this engine serves %T", h.a.Dir, base)
	}
	m, err := h.a.Apply(tm)
	if err != nil {
		return nil, err // a nil *Model must not become a non-nil interface
	}
	return m, nil
}

// InitialPolicy returns the model an engine starts with: the checkpoint in
// dir when given, else a fresh built-in policy from seed rounded to BF16 (what
// a serving copy holds).
func InitialPolicy(dir string, seed uint64) (engine.Model, error) {
	if dir != "" {
		m, err := LoadPolicy(dir)
		if err != nil {
			return nil, fmt.Errorf("load weights from %s: %w", dir, err)
		}
		return m, nil
	}
	m, err := pmodel.New(pmodel.DefaultConfig(), seed)
	if err != nil {
		return nil, err
	}
	m.RoundBF16()
	return m, nil
}

// PolicyTrainer maps the trainer section (with the rollout temperature the
// logprobs were sampled at, the engines' max_model_len and the run seed)
// onto the built-in trainer's config.
func PolicyTrainer(c config.Config) pmodel.TrainerConfig {
	tc := c.Trainer
	t := pmodel.DefaultTrainerConfig()
	t.LR = tc.LearningRate
	t.MaxGradNorm = tc.GradClip
	t.EpsLow, t.EpsHigh = tc.EpsClipLow, tc.EpsClipHigh
	t.Reduction = string(tc.LossReduction)
	// seq_mean_token_sum_norm's constant: the configured max_seq_len, else
	// the longest sequence the engines serve (0 leaves the model's own).
	t.ReductionMaxSeqLen = tc.MaxSeqLen
	if t.ReductionMaxSeqLen == 0 {
		t.ReductionMaxSeqLen = c.Engines.MaxModelLen
	}
	t.PolicyLoss = string(tc.PolicyLossType)
	t.ClipRatioC = tc.ClipRatioC
	t.CISPOEpsLow, t.CISPOEpsHigh = tc.CISPOEpsClipLow, tc.CISPOEpsClipHigh
	t.TISRatioType = string(tc.TISRatioType)
	t.TokenTISCap, t.SequenceTISCap = tc.TokenTISRatioClipHigh, tc.SequenceTISRatioClipHigh
	t.EntropyCoef, t.KLCoef = tc.EntropyCoef, tc.KLCoef
	t.SupportNorm = tc.NormalizeOverSupport
	if c.Rollout.Temperature > 0 {
		t.Temperature = c.Rollout.Temperature // the rollout logprobs were computed at it
	}
	t.Workers = max(1, min(runtime.GOMAXPROCS(0), 4))
	t.Seed = uint64(c.Run.Seed)
	t.FakeQuant = string(tc.FakeQuant)
	return t
}

// RouterConfig maps the router section onto the proxy's config. Replicas,
// the admin token, registry and logger are the caller's.
func RouterConfig(c config.RouterConfig) proxy.Config {
	p := proxy.DefaultConfig()
	p.Policy.Policy = string(c.Policy)
	p.Policy.LoadFactor = c.BalanceFactor
	p.Policy.MoveCost = c.MoveCost
	p.Policy.SessionTTL = c.SessionTTL
	p.Policy.SweepInterval = c.SweepInterval
	p.Policy.VirtualNodes = c.VirtualNodes
	p.Policy.FailThreshold = c.UnhealthyThreshold
	p.Policy.RecoverThreshold = c.HealthyThreshold
	p.Policy.LagRule = policy.LagMove
	if c.BehindVersionRule == config.BehindHold {
		p.Policy.LagRule = policy.LagHold
	}
	p.Policy.VersionRule = policy.VersionStaleness
	if c.VersionRule == config.VersionNewest {
		p.Policy.VersionRule = policy.VersionNewest
	}
	if c.MaxVersionLag >= 0 { // -1: the run's trainer.max_staleness_steps (RunRouterConfig)
		p.Policy.MaxVersionLag = int64(c.MaxVersionLag)
	}
	p.Policy.HashFallback = policy.HashWalk
	if c.HashFallback == config.HashFirstHealthy {
		p.Policy.HashFallback = policy.HashFirstHealthy
	}
	p.ListenAddr = c.Listen
	p.Front = string(c.Front)
	p.MaxBodyBytes = c.MaxBodyBytes
	p.HealthInterval = c.HealthCheckInterval
	p.HealthTimeout = c.HealthCheckTimeout
	p.MaxRetries = c.MaxRetries
	p.RetryRatio = c.RetryBudget
	p.RetryAfter = c.RetryAfter
	return p
}

// RunRouterConfig is RouterConfig for a run: the staleness budget
// defaults to the run's trainer.max_staleness_steps (config.Config.MaxVersionLag).
func RunRouterConfig(c config.Config) proxy.Config {
	p := RouterConfig(c.Router)
	p.Policy.MaxVersionLag = c.MaxVersionLag()
	return p
}

// PublisherTracker is the publisher's version-tracker config for a run:
// it routes engines down to target − c.MaxVersionLag(), so the router's
// hard minimum (MinVersionSet) leaves room for the staleness budget.
func PublisherTracker(c config.Config) tracker.Config {
	t := tracker.DefaultConfig()
	t.MaxLag = c.MaxVersionLag()
	return t
}

// Vocabulary is the rollouts' tokenizer: the engines' Hugging Face
// tokenizer (tokenizer.json, or its directory) when engines.external names
// one (all entries name the same, config validation checks it), else the
// built-in policy's character
// vocabulary. A Hugging Face vocabulary adds no BOS (a chat model's prompt
// carries its own markers), decodes without special tokens (what vLLM's
// text shows and rewards read) and ends a turn on any special token.
func Vocabulary(c config.EnginesConfig) (rollout.Vocabulary, error) {
	if len(c.External) == 0 || c.External[0].Tokenizer == "" {
		return rollout.BuiltinVocab{}, nil
	}
	v, err := VocabularyFrom(c.External[0].Tokenizer)
	if err != nil {
		return nil, fmt.Errorf("engines.external[0].tokenizer: %w", err)
	}
	return v, nil
}

// VocabularyFrom is Vocabulary for a tokenizer path (a Hugging Face
// tokenizer directory or tokenizer.json; RunTokenizer), the built-in
// policy's characters for "".
func VocabularyFrom(path string) (rollout.Vocabulary, error) {
	if path == "" {
		return rollout.BuiltinVocab{}, nil
	}
	tok, err := loadTokenizer(path)
	if err != nil {
		return nil, err
	}
	return hfVocab{tok}, nil
}

type hfVocab struct{ t *hftokenizer.Tokenizer }

func (v hfVocab) Encode(text string) []int32 { return v.t.Encode(text) }
func (v hfVocab) Decode(ids []int32) string  { return v.t.DecodeSkipSpecial(ids) }
func (v hfVocab) Prefix() []int32            { return nil }
func (v hfVocab) IsEOS(id int32) bool        { return v.t.IsSpecial(id) }
func (v hfVocab) Size() int32                { return int32(v.t.VocabSize()) }
