package config

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// enum is implemented by every string type with a fixed set of values. The
// validator and print-defaults read the allowed values from it, so the list
// lives in one place.
type enum interface{ Values() []string }

var enumIface = reflect.TypeFor[enum]()

// RouterPolicy picks the engine replica for a request.
type RouterPolicy string

// Router policies.
const (
	// PolicyBoundedSticky: sticky sessions, but a replica may hold at most
	// ceil(c·average) sessions (consistent hashing with bounded loads).
	PolicyBoundedSticky RouterPolicy = "bounded_sticky"
	// PolicyStickyLeastLoaded: SkyRL's sticky_least_loaded (new session →
	// replica with fewest sessions; sticks until unhealthy or released).
	PolicyStickyLeastLoaded RouterPolicy = "sticky_least_loaded"
	// PolicyConsistentHash: vllm-router's ring of virtual nodes.
	PolicyConsistentHash RouterPolicy = "consistent_hash"
	// PolicyRoundRobin ignores sessions.
	PolicyRoundRobin RouterPolicy = "round_robin"
	// PolicyLeastRequest sends to the replica with the fewest in-flight requests.
	PolicyLeastRequest RouterPolicy = "least_request"
)

// Values lists the router policies.
func (RouterPolicy) Values() []string {
	return []string{"bounded_sticky", "sticky_least_loaded", "consistent_hash", "round_robin", "least_request"}
}

// BehindVersionRule says what happens to sessions on a replica that falls
// behind the minimum policy version.
type BehindVersionRule string

// Behind-version rules.
const (
	// BehindMove reassigns the session on its next request (keeps throughput).
	BehindMove BehindVersionRule = "move"
	// BehindHold keeps the session where it is and makes its requests wait
	// until the replica catches up (keeps the prefix cache).
	BehindHold BehindVersionRule = "hold"
)

// Values lists the behind-version rules.
func (BehindVersionRule) Values() []string { return []string{"move", "hold"} }

// VersionRule says how the router treats a replica behind the newest
// version some replica acknowledged (issue 15).
type VersionRule string

// Version rules.
const (
	// VersionStaleness keeps a lagging replica's sessions while its lag is
	// within router.max_version_lag; it takes no new sessions while an
	// up-to-date replica can (SkyRL never breaks stickiness for a version).
	VersionStaleness VersionRule = "staleness"
	// VersionNewest is the rule before issue 15: a replica behind the newest
	// acknowledged version loses its sessions (behind_version_rule) the
	// moment another replica acks it; the publisher routes only the newest.
	VersionNewest VersionRule = "newest"
)

// Values lists the version rules.
func (VersionRule) Values() []string { return []string{"staleness", "newest"} }

// RouterFront is the router's HTTP front end (issue 22).
type RouterFront string

// Router front ends.
const (
	// FrontFast: the router's own HTTP/1.1 server on the proxied path;
	// anything unusual (admin, chunked requests, HTTP/1.0…) is handed to
	// net/http on the same connection.
	FrontFast RouterFront = "fast"
	// FrontLoop (default): the fast front with its plain requests served
	// from event loops, one per CPU (Linux; elsewhere fast): less CPU
	// per request than a goroutine per connection.
	FrontLoop RouterFront = "loop"
	// FrontNetHTTP: net/http's server for everything (the front before
	// issue 22's work; kept for side-by-side benchmarks).
	FrontNetHTTP RouterFront = "net_http"
)

// Values lists the router front ends.
func (RouterFront) Values() []string { return []string{"fast", "loop", "net_http"} }

// HashFallback says where consistent_hash sends a key whose ring point's
// replica cannot take it.
type HashFallback string

// Consistent-hash fallbacks.
const (
	// HashWalk walks on to the next ring point's replica (spreads the load).
	HashWalk HashFallback = "walk"
	// HashFirstHealthy is vllm-router's: the first healthy replica (one hot spot).
	HashFirstHealthy HashFallback = "first_healthy"
)

// Values lists the consistent-hash fallbacks.
func (HashFallback) Values() []string { return []string{"walk", "first_healthy"} }

// FilterMode is the dynamic-sampling mode.
type FilterMode string

// Filter modes.
const (
	FilterNone             FilterMode = "none"               // train on every group
	FilterFilter           FilterMode = "filter"             // DAPO: drop zero-variance groups, sample more
	FilterReplace          FilterMode = "replace"            // POLARIS: overwrite bad groups with good ones
	FilterZeroVarianceMask FilterMode = "zero_variance_mask" // mask the loss of zero-variance groups
)

// Values lists the filter modes.
func (FilterMode) Values() []string {
	return []string{"none", "filter", "replace", "zero_variance_mask"}
}

// StalePolicy says what the trainer does with a group older than
// max_staleness_steps when it is about to be trained.
type StalePolicy string

// Stale policies.
const (
	StaleRequeue StalePolicy = "requeue" // drop it and requeue its prompt (enforce the bound)
	StaleAccept  StalePolicy = "accept"  // train on it and count a violation (SkyRL's behaviour)
)

// Values lists the stale policies.
func (StalePolicy) Values() []string { return []string{"requeue", "accept"} }

// LossReduction is how per-token losses are reduced to one number.
type LossReduction string

// Loss reductions (SkyRL definitions, ppo_utils.py
// apply_loss_reduction_to_advantages_minibatch).
const (
	LossTokenMean           LossReduction = "token_mean"              // ÷ the mini-batch's trained tokens
	LossSequenceMean        LossReduction = "sequence_mean"           // each sequence's token mean, then the mean over sequences
	LossSeqMeanTokenSumNorm LossReduction = "seq_mean_token_sum_norm" // ÷ (sequences × trainer.max_seq_len), Dr. GRPO
	LossPromptMean          LossReduction = "prompt_mean"             // token mean within each prompt's group, then the mean over prompts
	LossTokenMeanLegacy     LossReduction = "token_mean_legacy"       // token mean within each microbatch, then the mean over microbatches
)

// Values lists the loss reductions.
func (LossReduction) Values() []string {
	return []string{"token_mean", "sequence_mean", "seq_mean_token_sum_norm", "prompt_mean", "token_mean_legacy"}
}

// PolicyLossType is the PPO-family policy loss (SkyRL policy_loss_type).
type PolicyLossType string

// Policy loss types.
const (
	PolicyLossRegular  PolicyLossType = "regular"   // PPO clipped surrogate
	PolicyLossDualClip PolicyLossType = "dual_clip" // plus a cap −A·clip_ratio_c for negative advantages
	PolicyLossGSPO     PolicyLossType = "gspo"      // one sequence-level ratio per sequence (GSPO-token)
	PolicyLossCISPO    PolicyLossType = "cispo"     // clipped importance weight times logp; clipped tokens keep a gradient
)

// Values lists the policy loss types.
func (PolicyLossType) Values() []string { return []string{"regular", "dual_clip", "gspo", "cispo"} }

// TISRatioType is the truncated-importance-sampling correction for
// off-policy rollouts (SkyRL off_policy_correction.tis_ratio_type; SkyRL's
// null is none).
type TISRatioType string

// TIS ratio types.
const (
	TISNone     TISRatioType = "none"     // no correction
	TISToken    TISRatioType = "token"    // per token: min(exp(logp_old − logp_rollout), token_tis_ratio_clip_high)
	TISSequence TISRatioType = "sequence" // per sequence: min(exp(Σ(logp_old − logp_rollout)), sequence_tis_ratio_clip_high)
)

// Values lists the TIS ratio types.
func (TISRatioType) Values() []string { return []string{"none", "token", "sequence"} }

// MicrobatchMode is the microbatch packing algorithm.
type MicrobatchMode string

// Microbatch modes.
const (
	MicrobatchBalanced MicrobatchMode = "balanced" // least-loaded bin (RL)
	MicrobatchFFD      MicrobatchMode = "ffd"      // first-fit decreasing (SFT)
)

// Values lists the microbatch modes.
func (MicrobatchMode) Values() []string { return []string{"balanced", "ffd"} }

// DPPartition splits microbatches across data-parallel ranks.
type DPPartition string

// DP partitions.
const (
	DPContiguous    DPPartition = "contiguous"     // equal contiguous chunks (SkyRL)
	DPKarmarkarKarp DPPartition = "karmarkar_karp" // balanced token sums (verl/slime/AReaL)
)

// Values lists the DP partitions.
func (DPPartition) Values() []string { return []string{"contiguous", "karmarkar_karp"} }

// PauseMode is what engines do with in-flight requests during a weight update.
type PauseMode string

// Pause modes (vLLM pause_generation).
const (
	PauseKeep  PauseMode = "keep"  // freeze in-flight requests, resume them on the new weights
	PauseAbort PauseMode = "abort" // abort in-flight requests; rollouts resubmit
	PauseWait  PauseMode = "wait"  // stop admitting, let in-flight requests finish first
)

// Values lists the pause modes.
func (PauseMode) Values() []string { return []string{"keep", "abort", "wait"} }

// TrainerBackend is where the gradient steps run.
type TrainerBackend string

// Trainer backends.
const (
	BackendBuiltin TrainerBackend = "builtin" // the in-process tiny policy trainer
	BackendRemote  TrainerBackend = "remote"  // an external worker over the bus
	BackendExec    TrainerBackend = "exec"    // a child process over the worker bridge (trainer.exec)
)

// Values lists the trainer backends.
func (TrainerBackend) Values() []string { return []string{"builtin", "remote", "exec"} }

// PublishMode is how new weights are shipped to engines.
type PublishMode string

// Publish modes.
const (
	PublishDelta PublishMode = "delta" // SkyRL XOR+zstd delta format
	PublishFull  PublishMode = "full"  // a full checkpoint every version
	PublishLoRA  PublishMode = "lora"  // LoRA adapters only
)

// Values lists the publish modes.
func (PublishMode) Values() []string { return []string{"delta", "full", "lora"} }

// WeightStore is where published weights live.
type WeightStore string

// Weight stores.
const (
	StoreLocal WeightStore = "local" // a directory shared by trainer and engines
	StoreS3    WeightStore = "s3"    // an S3 bucket
	StoreNATS  WeightStore = "nats"  // the bus's JetStream object store
)

// Values lists the weight stores.
func (WeightStore) Values() []string { return []string{"local", "s3", "nats"} }

// Role is a part of the system a node runs.
type Role string

// Node roles.
const (
	RoleAll       Role = "all"
	RoleBus       Role = "bus"
	RoleRouter    Role = "router"
	RoleEngine    Role = "engine"
	RoleRollout   Role = "rollout"
	RoleFilter    Role = "filter"
	RoleTrainer   Role = "trainer"
	RolePublisher Role = "publisher"
)

// Values lists the node roles.
func (Role) Values() []string {
	return []string{"all", "bus", "router", "engine", "rollout", "filter", "trainer", "publisher"}
}

// LogLevel is the minimum level logged.
type LogLevel string

// Log levels.
const (
	LevelDebug LogLevel = "debug"
	LevelInfo  LogLevel = "info"
	LevelWarn  LogLevel = "warn"
	LevelError LogLevel = "error"
)

// Values lists the log levels.
func (LogLevel) Values() []string { return []string{"debug", "info", "warn", "error"} }

// LogFormat is the log output format.
type LogFormat string

// Log formats.
const (
	FormatAuto    LogFormat = "auto"    // console on a terminal, JSON otherwise
	FormatJSON    LogFormat = "json"    // one JSON object per line
	FormatConsole LogFormat = "console" // human-readable
)

// Values lists the log formats.
func (LogFormat) Values() []string { return []string{"auto", "json", "console"} }

// checkEnums validates every enum-typed field (and enum slice) of the struct
// v, reporting `"x" is not one of a, b, c` under section.field.
func (c *checker) checkEnums(v any) {
	rv := reflect.ValueOf(v)
	for _, f := range fieldsOf(rv.Type()) {
		fv := rv.Field(f.index)
		switch {
		case fv.Type().Implements(enumIface):
			c.checkEnum(f.key, fv)
		case fv.Kind() == reflect.Slice && fv.Type().Elem().Implements(enumIface):
			for i := range fv.Len() {
				c.checkEnum(fmt.Sprintf("%s[%d]", f.key, i), fv.Index(i))
			}
		}
	}
}

func (c *checker) checkEnum(field string, v reflect.Value) {
	allowed := v.Interface().(enum).Values()
	if !slices.Contains(allowed, v.String()) {
		c.fail(field, "%q is not one of %s", v.String(), strings.Join(allowed, ", "))
	}
}
