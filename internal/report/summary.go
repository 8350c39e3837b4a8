package report

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Summary is summary.json: the figures of one run. Field names are the
// file's keys and are stable (scripts and tests read them).
type Summary struct {
	RunID string `json:"run_id"`
	Task  string `json:"task"`
	Seed  int64  `json:"seed"`
	// Steps is the number of trainer steps completed; StepsRequested the target.
	Steps          int   `json:"steps"`
	StepsRequested int   `json:"steps_requested"`
	FinalVersion   int64 `json:"final_version"`
	// RewardMeanPerStep is the mean trajectory reward of each trained
	// mini-batch, in step order.
	RewardMeanPerStep []float64 `json:"reward_mean_per_step"`
	// RewardFirst5/Last5 are the means of the first and last five entries.
	RewardFirst5 float64 `json:"reward_first5"`
	RewardLast5  float64 `json:"reward_last5"`
	// RewardByVersion is the reward of everything each policy version
	// generated: every finished group dynamic sampling judged, kept or
	// dropped, under its oldest token's version. Under filter or replace
	// the trained mini-batches leave out the groups the policy gets right
	// every time, so RewardMeanPerStep cannot show it improving; this can.
	// RewardGeneratedFirst5/Last5 pool the trajectories of the first and
	// last five versions that generated at least one mini-batch's worth of
	// groups (a version cut short by the end of the run finished only its
	// quickest groups: too few, and biased towards short episodes).
	// RewardGeneratedVersions counts the versions that qualified (0: the
	// two figures mean nothing).
	RewardByVersion         []VersionReward `json:"reward_by_version"`
	RewardGeneratedFirst5   float64         `json:"reward_generated_first5"`
	RewardGeneratedLast5    float64         `json:"reward_generated_last5"`
	RewardGeneratedVersions int             `json:"reward_generated_versions"`
	// Staleness of trained groups in steps under StalenessMeasure
	// (scheduled: trainer step − the step the group was scheduled at;
	// token: trainer version − oldest token version), the bound S, and the
	// histogram (index k = staleness k, the last bucket > S).
	StalenessMeasure   string  `json:"staleness_measure"`
	StalenessMax       int64   `json:"staleness_max"`
	StalenessMean      float64 `json:"staleness_mean"`
	StalenessBound     int64   `json:"staleness_bound"`
	StalenessHistogram []int64 `json:"staleness_histogram"`
	// Group and trajectory accounting.
	GroupsGenerated           int64 `json:"groups_generated"`
	GroupsTrained             int64 `json:"groups_trained"`
	GroupsDroppedZeroVariance int64 `json:"groups_dropped_zero_variance"`
	GroupsRequeuedStale       int64 `json:"groups_requeued_stale"`
	// Dynamic sampling (FilterMode: none, filter, replace,
	// zero_variance_mask): groups whose slot took a copy of a good group
	// (replace), generation batches discarded for too few good groups
	// (replace) or for nothing left to train after masking
	// (zero_variance_mask), trajectories whose loss mask was zeroed
	// (zero_variance_mask), groups requeued when max_sample_batches was
	// reached, and per trained step the generation batches (B finished
	// groups each) it took to fill, with their mean.
	FilterMode                 string  `json:"filter_mode"`
	GroupsReplaced             int64   `json:"groups_replaced"`
	GenerationBatchesResampled int64   `json:"generation_batches_resampled"`
	TrajectoriesMasked         int64   `json:"trajectories_masked"`
	GroupsRequeuedSampling     int64   `json:"groups_requeued_sampling"`
	GenerationBatchesPerStep   []int   `json:"generation_batches_per_step"`
	GenerationBatchesMean      float64 `json:"generation_batches_mean"`
	// GroupsRequeuedAborted includes the groups whose episodes were
	// cancelled when the run stopped (their prompts are requeued in the
	// durable ledger, not lost).
	GroupsRequeuedAborted int64 `json:"groups_requeued_aborted"`
	GroupsInFlightAtStop  int64 `json:"groups_in_flight_at_stop"`
	TrajectoriesStarted   int64 `json:"trajectories_started"`
	TrajectoriesFinished  int64 `json:"trajectories_finished"`
	TrajectoriesAborted   int64 `json:"trajectories_aborted"`
	// TrajectoriesLost must be 0: trajectories neither finished nor
	// reported aborted, plus those of groups reported by a rollout actor
	// that never reached the controller's books.
	TrajectoriesLost int64 `json:"trajectories_lost"`
	// TrajectoriesMixedVersions counts finished trajectories whose tokens
	// came from more than one policy version (keep-mode updates).
	TrajectoriesMixedVersions int64 `json:"trajectories_mixed_versions"`
	TurnResubmits             int64 `json:"turn_resubmits"`
	// TrajectoriesAbortedEnvError/EnvTimeout are the trajectories (among
	// TrajectoriesAborted) aborted by their chat environment: it failed
	// (an error, a dead server, garbage) or did not answer within
	// rollout.env.step_timeout. Their groups were requeued.
	TrajectoriesAbortedEnvError   int64 `json:"trajectories_aborted_env_error"`
	TrajectoriesAbortedEnvTimeout int64 `json:"trajectories_aborted_env_timeout"`
	// EnvBackoffs counts the groups that waited before their episodes
	// because earlier groups' environment failed (doubling from 50 ms to
	// 1 s; a finished group resets it), EnvBackoffSeconds the time they
	// waited in all.
	EnvBackoffs       int64   `json:"env_backoffs"`
	EnvBackoffSeconds float64 `json:"env_backoff_seconds"`
	// ToolCalls counts the tool calls of finished chat-environment
	// trajectories, ToolCallsMalformed those answered with a parse error.
	ToolCalls          int64 `json:"tool_calls"`
	ToolCallsMalformed int64 `json:"tool_calls_malformed"`
	// ToolCallsTimedOut counts the calls the environment cut off at a
	// time limit (a tool's wall clock or CPU seconds; the call was answered
	// with an error message, the trajectory went on);
	// EpisodesWithToolCall the finished trajectories with at least one
	// well-formed tool call.
	ToolCallsTimedOut    int64 `json:"tool_calls_timed_out"`
	EpisodesWithToolCall int64 `json:"episodes_with_tool_call"`
	// Throughput: all trajectory tokens (prompt, generated, observations)
	// and generated tokens per wall second.
	Tokens                int64   `json:"tokens"`
	GeneratedTokens       int64   `json:"generated_tokens"`
	TokensPerSecond       float64 `json:"tokens_per_second"`
	GeneratedTokensPerSec float64 `json:"generated_tokens_per_second"`
	WallSeconds           float64 `json:"wall_seconds"`
	// Engines lists each engine's final version.
	EngineVersions []int64 `json:"engine_versions"`
	// PauseMode is the engines' weight-update mode (keep, abort, wait).
	PauseMode string `json:"pause_mode"`
	// Interrupted is true when the run was stopped (Ctrl-C) before Steps.
	Interrupted bool `json:"interrupted"`
	// Error is the error that ended the run early, if any.
	Error string `json:"error,omitempty"`
	// PerStep has one row per trained step.
	PerStep []StepRow `json:"per_step"`
	// TrainerRanks has one row per rank of the exec backend's worker group
	// (trainer.exec_ranks; docs/protocol.md "Worker groups"); absent on
	// the other backends.
	TrainerRanks []RankRow `json:"trainer_ranks,omitempty"`
}

// RankRow is one trainer rank's figures over the run.
type RankRow struct {
	Rank  int `json:"rank"`
	Steps int `json:"steps"`
	// StepSecondsMean is the rank's mean time in a TrainBatch (its
	// microbatches, the all-reduces and the optimiser step);
	// AllReduceSecondsMean the gradient all-reduce's part of it.
	StepSecondsMean      float64 `json:"step_seconds_mean"`
	AllReduceSecondsMean float64 `json:"allreduce_seconds_mean"`
	// MemoryBytes is the rank's peak memory (CUDA peak allocation, or the
	// process's peak resident set on CPU).
	MemoryBytes int64 `json:"memory_bytes"`
}

// StepRow describes one trainer step.
type StepRow struct {
	Step       int64   `json:"step"`
	Version    int64   `json:"version"`
	RewardMean float64 `json:"reward_mean"`
	Loss       float64 `json:"loss"`
	Entropy    float64 `json:"entropy"`
	GradNorm   float64 `json:"grad_norm"`
	Mismatch   float64 `json:"mismatch"`
	// MismatchSameVersion is Mismatch over the SameVersionTokens tokens
	// generated by the very version the step trained (BF16 serving
	// rounding plus any engine–trainer discrepancy; no staleness).
	MismatchSameVersion float64 `json:"mismatch_same_version"`
	SameVersionTokens   int     `json:"same_version_tokens"`
	Tokens              int     `json:"tokens"`
	Microbatches        int     `json:"microbatches"`
	StalenessMax        int64   `json:"staleness_max"`
	// ElapsedSeconds is the wall time since the run started when the step
	// finished. TokensPerSecond is the rollout throughput (trajectory
	// tokens finished per second) since the step before; TrainTokensPerSecond
	// the step's mini-batch tokens over the same interval.
	ElapsedSeconds       float64 `json:"elapsed_seconds"`
	TokensPerSecond      float64 `json:"tokens_per_second"`
	TrainTokensPerSecond float64 `json:"train_tokens_per_second"`
	// TrainSeconds is the trainer's time in the step itself (the backend's
	// Step: in-process, or the exec child's TrainBatch and the checkpoint
	// load); PublishSeconds the time to publish the new version.
	TrainSeconds   float64 `json:"train_seconds"`
	PublishSeconds float64 `json:"publish_seconds"`
}

// VersionReward is the reward of the groups one policy version generated.
type VersionReward struct {
	Version int64 `json:"version"`
	Groups  int64 `json:"groups"`
	// Trajectories counts the finite rewards (NaN ones are left out and
	// counted in NaN).
	Trajectories int64   `json:"trajectories"`
	NaN          int64   `json:"nan,omitempty"`
	Mean         float64 `json:"mean"`
}

// GeneratedFirstLast pools the trajectories of the first and last five
// versions in rows (version order) with at least minGroups groups: the
// trajectory-weighted mean reward of each five, and how many versions
// qualified (0, 0, 0 when none does).
func GeneratedFirstLast(rows []VersionReward, minGroups int64) (first, last float64, versions int) {
	var ok []VersionReward
	for _, r := range rows {
		if r.Groups >= minGroups && r.Trajectories > 0 {
			ok = append(ok, r)
		}
	}
	if len(ok) == 0 {
		return 0, 0, 0
	}
	k := min(5, len(ok))
	return pooled(ok[:k]), pooled(ok[len(ok)-k:]), len(ok)
}

func pooled(rows []VersionReward) float64 {
	var sum float64
	var n int64
	for _, r := range rows {
		sum += r.Mean * float64(r.Trajectories)
		n += r.Trajectories
	}
	return sum / float64(n)
}

// Mean5 returns the means of the first and last min(5, len) values.
func Mean5(xs []float64) (first, last float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	k := min(5, len(xs))
	for i := range k {
		first += xs[i]
		last += xs[len(xs)-k+i]
	}
	return first / float64(k), last / float64(k)
}

// WriteJSON writes dir/summary.json (creating dir).
func WriteJSON(dir string, s Summary) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return writeFile(filepath.Join(dir, "summary.json"), append(data, '\n'))
}

// ReadJSON reads dir/summary.json.
func ReadJSON(dir string) (Summary, error) {
	var s Summary
	data, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		return s, fmt.Errorf("report: %w", err)
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return s, fmt.Errorf("report: summary.json: %w", err)
	}
	return s, nil
}

// writeFile writes via a temporary file and a rename, so a reader never
// sees half a report.
func writeFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}
