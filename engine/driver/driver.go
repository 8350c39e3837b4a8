// Package driver drives one inference engine — real vLLM, SGLang, or
// asyncrl's built-in engine — as a process over its real HTTP API: health,
// pause/resume, prefix-cache reset, sleep/wake, full-checkpoint loads,
// in-place delta application, in-place LoRA loads, metrics and
// token-in/token-out generation.
//
// New(kind, url, opts) returns the driver for a kind. "builtin" returns the
// vLLM driver (the built-in engine speaks vLLM's routes) whose Kind reports
// "builtin". A route the engine does not serve answers a *RouteError whose
// Hint names the flag or environment variable that enables it; an operation
// an engine cannot do at all answers an error matching ErrUnsupported.
//
// Capabilities reads the engine's release (vLLM's GET /version and dev-mode
// /server_info) and derives what it can do from a feature table with the
// upstream PR of every row (VLLMFeatures); the vLLM driver adapts to it —
// a pause mode the release would silently turn into another is refused
// naming the release that has it, wait is emulated where it can be — and
// Check grades an engine against what a run needs (Needs), the one home
// of the checks `asyncrl engines check` and the run's preflight print.
//
// Every driver keeps its own record of the weight swaps it made (version,
// start and end of the swap) and answers VersionsDuring from it, so per-token
// weight versions can be bounded for engines that do not report them.
//
// It is also the one home of what an engine is for callers that know an
// engine only by URL: ParseMetrics reads either kind's /metrics (the
// router's load scrape), ProbeHealth probes either kind's health in a way
// that tolerates an SGLang paused for a swap (the router's health
// checks), and each driver's Capabilities reads its release and derives
// its features from a table with the upstream source of each row
// (SGLangFeatures for SGLang).
//
// The package imports only the standard library, Prometheus' text parser
// and the engine's wire types; it never imports actors or cluster.
package driver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Kind names an engine implementation.
type Kind string

// The engine kinds.
const (
	KindVLLM    Kind = "vllm"
	KindSGLang  Kind = "sglang"
	KindBuiltin Kind = "builtin"
)

// PauseMode says what a pause does with in-flight requests (vLLM's /pause
// mode query parameter).
type PauseMode string

// The pause modes.
const (
	// PauseAbort ends in-flight requests now with partial results.
	PauseAbort PauseMode = "abort"
	// PauseKeep freezes queued and running requests; they continue after
	// Resume (tokens after it come from the weights installed meanwhile).
	PauseKeep PauseMode = "keep"
	// PauseWait lets in-flight requests finish and admits none.
	PauseWait PauseMode = "wait"
)

// Driver drives one engine over HTTP. Methods are safe for concurrent use.
type Driver interface {
	// Kind is the engine kind the driver was built for.
	Kind() Kind
	// URL is the engine's base URL (no trailing slash).
	URL() string
	// Health answers nil when the engine serves (GET /health is 200).
	Health(ctx context.Context) error
	// Pause pauses generation; clearCache also drops the KV/prefix cache.
	Pause(ctx context.Context, mode PauseMode, clearCache bool) error
	// Resume resumes generation after Pause.
	Resume(ctx context.Context) error
	// IsPaused reports whether the engine is paused.
	IsPaused(ctx context.Context) (bool, error)
	// ResetPrefixCache drops the prefix cache.
	ResetPrefixCache(ctx context.Context) error
	// Sleep frees GPU memory (level 1: offload weights, drop KV cache;
	// level 2: drop both).
	Sleep(ctx context.Context, level int) error
	// WakeUp restores what Sleep freed.
	WakeUp(ctx context.Context) error
	// LoadCheckpoint loads a full HF-layout checkpoint dir (config.json +
	// safetensors) and reports version as served.
	LoadCheckpoint(ctx context.Context, dir string, version int64) error
	// ApplyDelta applies one SkyRL-format delta version in place (dir = the
	// delta version's directory as weights/delta writes it).
	ApplyDelta(ctx context.Context, dir string, version int64) error
	// LoadLoRA loads (or replaces in place, load_inplace) the adapter name
	// from path; it is then served as model name.
	LoadLoRA(ctx context.Context, name, path string) error
	// UnloadLoRA unloads the adapter name.
	UnloadLoRA(ctx context.Context, name string) error
	// ServedVersion is the weight version the engine serves: reported by
	// the engine where it can (vLLM with asyncrl's worker extension, the
	// built-in engine), else the driver's own record of its last load.
	ServedVersion(ctx context.Context) (int64, error)
	// Models lists the served model names (base and adapters).
	Models(ctx context.Context) ([]string, error)
	// Metrics reads the engine's load gauges and prefix-cache counters.
	Metrics(ctx context.Context) (Metrics, error)
	// Generate runs one token-in/token-out completion.
	Generate(ctx context.Context, req GenerateRequest) (GenerateResult, error)
	// VersionsDuring bounds the weight versions that can have produced
	// tokens between start and end from the driver's own swap record:
	// oldest is the version served at start, newest the newest version
	// whose swap began before end. Both are -1 when the record knows of no
	// version in that window (nothing loaded through this driver yet).
	VersionsDuring(start, end time.Time) (oldest, newest int64)
	// Swaps returns a copy of the driver's swap record (the newest
	// SwapsKept swaps), oldest first.
	Swaps() []Swap
	// Capabilities reads the engine's release (and what it reports of its
	// own configuration) and derives what it can do from the feature
	// table; an engine that will not say its release answers
	// UnknownCapabilities (every feature assumed), not an error.
	Capabilities(ctx context.Context) (Capabilities, error)
}

// Swap is one weight swap the driver made: Version became served during
// [Start, End] (End is when the engine acknowledged the load).
type Swap struct {
	Version int64
	Start   time.Time
	End     time.Time
}

// GenerateRequest is a token-in/token-out completion.
type GenerateRequest struct {
	// Model is the served model (or LoRA adapter) name; empty means
	// Options.Model.
	Model string
	// PromptIDs are the prompt's token ids (sent verbatim).
	PromptIDs []int32
	// MaxTokens is the number of tokens to generate at most (>= 1).
	MaxTokens int
	// Temperature: 0 = greedy.
	Temperature float64
	// TopP in (0, 1]; 0 means unset (1).
	TopP float64
	// TopK: 0 or -1 = off.
	TopK int
	// Stop strings end generation (their tokens stay in TokenIDs).
	Stop []string
	// Seed, when non-nil, makes sampling reproducible.
	Seed *int64
	// RequestID names the request for aborts (optional).
	RequestID string
}

// GenerateResult is one completion's tokens.
type GenerateResult struct {
	// PromptIDs are the prompt's token ids as the engine saw them.
	PromptIDs []int32
	// TokenIDs are the generated token ids.
	TokenIDs []int32
	// Logprobs hold the sampled token's logprob per generated token.
	Logprobs []float32
	// FinishReason is "stop", "length" or "abort".
	FinishReason string
	// TokenVersions holds one weight version per generated token when the
	// engine reports them (built-in extension token_weight_versions); nil
	// otherwise — use VersionsDuring(Start, End) to bound them.
	TokenVersions []int64
	// Start and End bracket the HTTP exchange (driver's clock).
	Start, End time.Time
}

// Metrics are an engine's load and prefix-cache figures. vLLM (and the
// built-in engine) report vllm:num_requests_running,
// vllm:num_requests_waiting, vllm:kv_cache_usage_perc,
// vllm:prefix_cache_hits_total and vllm:prefix_cache_queries_total; SGLang
// reports sglang:num_running_reqs, sglang:num_queue_reqs,
// sglang:token_usage and sglang:cache_hit_rate (a ratio, no counters).
type Metrics struct {
	Running float64
	Waiting float64
	// KVCacheUsage is the fraction (0–1) of KV cache in use.
	KVCacheUsage float64
	// PrefixHits and PrefixQueries count prompt tokens (vLLM); zero where
	// the engine reports only a rate.
	PrefixHits    float64
	PrefixQueries float64
	// PrefixHitRate is hits/queries (vLLM) or the engine's own rate.
	PrefixHitRate float64
	// Raw holds every sample read, by metric name (labels summed).
	Raw map[string]float64
	// HasLoad: the text held at least one load gauge (queue length or
	// KV-cache usage) of a known engine kind.
	HasLoad bool
}

// Options configure a driver.
type Options struct {
	// Client is the HTTP client; nil uses a client with Timeout.
	Client *http.Client
	// Model is the served model name (--served-model-name); empty: the
	// first name /v1/models lists, looked up on first use.
	Model string
	// Timeout bounds each call without a context deadline (default 60s);
	// weight loads and collective_rpc calls get LoadTimeout.
	Timeout time.Duration
	// LoadTimeout bounds weight loads (default 10 min).
	LoadTimeout time.Duration
	// Now is the clock for the swap record (default time.Now).
	Now func() time.Time
	// APIKey, when set, is sent on every request as "Authorization:
	// Bearer <key>" (vLLM --api-key, the built-in engine's key). Never
	// logged or put in an error.
	APIKey string
}

// ErrUnsupported is matched (errors.Is) by errors for operations an engine
// kind cannot perform at all.
var ErrUnsupported = errors.New("operation not supported by this engine")

// UnsupportedError reports an operation an engine kind cannot perform;
// errors.Is(err, ErrUnsupported) holds.
type UnsupportedError struct {
	Engine string // the engine URL
	Kind   Kind
	Op     string
	Hint   string
}

func (e *UnsupportedError) Error() string {
	s := fmt.Sprintf("%s engine %s: %s is not supported", e.Kind, e.Engine, e.Op)
	if e.Hint != "" {
		s += " (" + e.Hint + ")"
	}
	return s
}

// Is makes errors.Is(err, ErrUnsupported) true.
func (e *UnsupportedError) Is(target error) bool { return target == ErrUnsupported }

// RouteError is an engine's failure on one route: a non-2xx status, or a
// body of the wrong shape (Status is then the HTTP status it came with).
// Hint names the flag or variable that fixes it where one is known.
type RouteError struct {
	Engine  string // the engine URL
	Route   string // e.g. "POST /pause"
	Status  int    // HTTP status; 0 when the request never got an answer
	Message string // the engine's error message or the transport error
	Hint    string
	Err     error // the underlying transport or decode error, if any
}

func (e *RouteError) Error() string {
	s := fmt.Sprintf("engine %s: %s", e.Engine, e.Route)
	if e.Status != 0 {
		s += fmt.Sprintf(": HTTP %d", e.Status)
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Hint != "" {
		s += " (hint: " + e.Hint + ")"
	}
	return s
}

// Unwrap returns the underlying error.
func (e *RouteError) Unwrap() error { return e.Err }

// New returns the driver for kind at url (scheme://host:port, no path).
func New(kind Kind, url string, opts Options) (Driver, error) {
	switch kind {
	case KindVLLM, KindBuiltin:
		return newVLLM(kind, url, opts)
	case KindSGLang:
		return newSGLang(url, opts)
	default:
		return nil, fmt.Errorf("engine driver: unknown kind %q (want vllm, sglang or builtin)", kind)
	}
}
