package config

import "time"

// RolloutConfig configures the rollout actors that turn prompts into groups
// of trajectories.
type RolloutConfig struct {
	// Task names the environment (see package tasks), e.g. reverse, arith, guess.
	Task string `yaml:"task" doc:"task (environment) name, e.g. reverse, arith, guess"`
	// Dataset is a JSONL file of prompts ({"id","text","seed"} per line);
	// empty samples prompts from the task's own generator.
	Dataset string `yaml:"dataset" doc:"JSONL prompt file ({\"id\",\"text\",\"seed\"} per line); empty = the task's generator"`
	// NSamplesPerPrompt is the GRPO group size n (SkyRL default 8).
	NSamplesPerPrompt int `yaml:"n_samples_per_prompt" doc:"trajectories per prompt (GRPO group size n; SkyRL uses 8)"`
	// MaxTurns caps the turns of one episode; 0 uses the task's own limit.
	MaxTurns int `yaml:"max_turns" doc:"most turns per episode; 0 = the task's own limit"`
	// Concurrency is the trajectories one rollout actor drives at once.
	Concurrency int `yaml:"concurrency" doc:"trajectories one rollout actor drives at once"`
	// TurnTimeout bounds one engine call; a timed-out trajectory is retried.
	TurnTimeout time.Duration `yaml:"turn_timeout" doc:"timeout of one turn's engine request"`
	// Temperature is the sampling temperature (0 = greedy).
	Temperature float64 `yaml:"temperature" doc:"sampling temperature (0 = greedy)"`
	// TopP is nucleus sampling's probability mass (1 = off).
	TopP float64 `yaml:"top_p" doc:"nucleus sampling mass in (0, 1]; 1 = off"`
	// TopK keeps the k most likely tokens (-1 = off, as in vLLM/SkyRL).
	TopK int `yaml:"top_k" doc:"sample among the k most likely tokens; -1 = off"`
	// MaxTokens caps the tokens generated per turn; 0 uses the task's limit.
	MaxTokens int `yaml:"max_tokens" doc:"most tokens generated per turn; 0 = the task's own limit"`
}

// DefaultRollout samples the multi-turn gridwalk task with n=8 (SkyRL's
// group size). Tuned for issue 5 (measured with `asyncrl run --steps 30`
// on 2 cores, docs/run.md): gridwalk learns visibly in 30 async steps
// (mean reward ~0.05 → ~0.3) in about 12 s, and n=8 gives GRPO groups with
// reward variance far more often than n=4, so the filter drops fewer.
// Temperature 1 and no top-p/top-k keep the rollout distribution equal to
// the policy's, which the importance ratio assumes.
func DefaultRollout() RolloutConfig {
	return RolloutConfig{
		Task:              "gridwalk",
		NSamplesPerPrompt: 8,
		MaxTurns:          0,
		Concurrency:       8,
		TurnTimeout:       60 * time.Second,
		Temperature:       1,
		TopP:              1,
		TopK:              -1,
		MaxTokens:         0,
	}
}

// Validate checks the rollout section.
func (c RolloutConfig) Validate() error {
	v := checker{section: "rollout"}
	v.notEmpty("task", c.Task)
	v.atLeast("n_samples_per_prompt", int64(c.NSamplesPerPrompt), 1)
	v.atLeast("max_turns", int64(c.MaxTurns), 0)
	v.atLeast("concurrency", int64(c.Concurrency), 1)
	v.positiveDuration("turn_timeout", c.TurnTimeout)
	v.nonNegativeFloat("temperature", c.Temperature)
	if !(c.TopP > 0 && c.TopP <= 1) {
		v.fail("top_p", "must be in (0, 1], got %g", c.TopP)
	}
	v.unboundedOrAtLeast("top_k", int64(c.TopK), 1)
	v.atLeast("max_tokens", int64(c.MaxTokens), 0)
	return v.err()
}
