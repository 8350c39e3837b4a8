package engine

import (
	"errors"
	"fmt"

	"github.com/asyncrl/asyncrl/engine/latency"
)

// Sentinel errors.
var (
	// ErrConfig wraps every Config.Validate error.
	ErrConfig = errors.New("engine: invalid config")
	// ErrVersionDecrease is returned by SetModel for a version below the
	// one being served (HTTP 409).
	ErrVersionDecrease = errors.New("engine: weight version must not decrease")
	// ErrNoLoader is returned when a checkpoint must be loaded but no
	// ModelLoader was given (WithLoader).
	ErrNoLoader = errors.New("engine: no model loader configured")
	// ErrClosed is returned by calls after Shutdown/Close.
	ErrClosed = errors.New("engine: closed")
)

// Config configures one engine. Zero values are not defaults: start from
// DefaultConfig.
type Config struct {
	// ServedModelName is the `model` clients must send (vLLM
	// --served-model-name); an empty `model` in a request also selects it.
	ServedModelName string `json:"served_model_name" yaml:"served_model_name"`
	// MaxModelLen bounds prompt + max_tokens per sequence (vLLM
	// --max-model-len); it is further capped by the model's MaxSeqLen, and
	// 0 means the model's MaxSeqLen alone.
	MaxModelLen int `json:"max_model_len" yaml:"max_model_len"`
	// DefaultMaxTokens is max_tokens for completions that omit it (vLLM: 16).
	// Chat requests that omit it may use the whole remaining context.
	DefaultMaxTokens int `json:"default_max_tokens" yaml:"default_max_tokens"`
	// AddBOS prepends tokenizer.BOS to text prompts (as a tokenizer with
	// add_special_tokens does); token-id prompts are used verbatim.
	AddBOS bool `json:"add_bos" yaml:"add_bos"`
	// Seed seeds the random streams of requests that carry no `seed`.
	Seed uint64 `json:"seed" yaml:"seed"`
	// TimeScale multiplies every modelled step duration before the engine
	// sleeps it: 1 = real time of the modelled GPU, 0 = never sleep (tests).
	TimeScale float64 `json:"time_scale" yaml:"time_scale"`
	// Latency sizes the modelled server: MaxNumSeqs, MaxWaiting (429
	// beyond it), BlockSize (16), CacheBlocks, and the prefill/decode costs.
	Latency latency.Config `json:"latency" yaml:"latency"`
}

// DefaultConfig serves "asyncrl-policy" with a 2048-token context in real
// modelled time (TimeScale 1) on latency.DefaultConfig.
func DefaultConfig() Config {
	return Config{
		ServedModelName:  "asyncrl-policy",
		MaxModelLen:      2048,
		DefaultMaxTokens: 16,
		AddBOS:           true,
		Seed:             0,
		TimeScale:        1,
		Latency:          latency.DefaultConfig(),
	}
}

// Validate names the first invalid field and its allowed values.
func (c Config) Validate() error {
	if err := c.Latency.Validate(); err != nil {
		return fmt.Errorf("%w: Latency: %w", ErrConfig, err)
	}
	switch {
	case c.ServedModelName == "":
		return fmt.Errorf("%w: ServedModelName must not be empty", ErrConfig)
	case c.MaxModelLen < 0:
		return fmt.Errorf("%w: MaxModelLen must be >= 0 (0 = the model's limit), got %d", ErrConfig, c.MaxModelLen)
	case c.DefaultMaxTokens < 1:
		return fmt.Errorf("%w: DefaultMaxTokens must be >= 1, got %d", ErrConfig, c.DefaultMaxTokens)
	case !(c.TimeScale >= 0):
		return fmt.Errorf("%w: TimeScale must be >= 0 (0 = no sleeping), got %v", ErrConfig, c.TimeScale)
	case c.Latency.CacheBlocks*c.Latency.BlockSize < c.MaxModelLen:
		return fmt.Errorf("%w: Latency.CacheBlocks*BlockSize (%d tokens) must hold one MaxModelLen (%d) sequence",
			ErrConfig, c.Latency.CacheBlocks*c.Latency.BlockSize, c.MaxModelLen)
	}
	return nil
}
