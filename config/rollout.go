package config

import (
	"encoding/json"
	"fmt"
	"time"
)

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
	// RoutedExperts asks the engines for each token's mixture-of-experts
	// routing (R3, rollout routing replay) and packs it into the token
	// batch's routed_experts column (messages/vllmwire has the wire form).
	RoutedExperts RoutedExpertsConfig `yaml:"routed_experts" doc:"R3: ask the engines for routed experts (MoE models) and pack them for the trainer"`
	// SupportFromLogprobs > 0 asks for that many top logprobs per token and,
	// where the engine sends no sample_support (vLLM), builds the sample
	// support sets from them: serve vLLM with --logprobs-mode
	// processed_logprobs so filtered candidates show as -9999.
	SupportFromLogprobs int `yaml:"support_from_logprobs" doc:"top logprobs per token to rebuild sample support sets from (vLLM with --logprobs-mode processed_logprobs); 0 = off"`
	// ChatTemplate makes every episode a chat conversation built with the
	// model's chat template, token-in/token-out (docs/chat.md): the first
	// observation is the user message of a templated prompt with the
	// generation prompt, every later one the tokens the template puts after
	// the model's turn plus the next user message and generation prompt;
	// the history is never re-tokenised. It needs the model's Hugging Face
	// tokenizer directory with a chat template (engines.external[].tokenizer).
	ChatTemplate bool `yaml:"chat_template" doc:"build chat-format episodes with the model's chat template, token-in/token-out (needs a tokenizer directory with a chat template; docs/chat.md)"`
	// SystemPrompt is the system message chat episodes start with.
	SystemPrompt string `yaml:"system_prompt" doc:"system message of chat episodes (\"\" = none; only with chat_template)"`
	// ChatTemplateKwargs are extra variables for the chat template, a JSON
	// object (SkyRL's generator.chat_template_kwargs), e.g.
	// {"enable_thinking": false} for Qwen3.
	ChatTemplateKwargs string `yaml:"chat_template_kwargs" doc:"JSON object of extra chat-template variables, e.g. '{\"enable_thinking\": false}' (\"\" = none; only with chat_template)"`
	// Env says where chat environments live (docs/environments.md).
	Env RolloutEnvConfig `yaml:"env" doc:"chat environments: protocol (task, chat_http, openenv), server urls, tool-call format, step timeout"`
}

// RoutedExpertsConfig is rollout.routed_experts: off by default; when on,
// the served model's routing shape, which the wire form is checked against.
type RoutedExpertsConfig struct {
	Enabled    bool `yaml:"enabled" doc:"send return_routed_experts and routed_experts_prompt_start, pack the routes (default off)"`
	Layers     int  `yaml:"layers" doc:"MoE layers L of the served model (layers, top_k and num_experts all 0: read from model's config.json)"`
	TopK       int  `yaml:"top_k" doc:"experts chosen per token per layer (K)"`
	NumExperts int  `yaml:"num_experts" doc:"experts per layer N (every id is < N; fixes the packed dtype)"`
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
		Env:               DefaultRolloutEnv(),
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
	v.atLeast("support_from_logprobs", int64(c.SupportFromLogprobs), 0)
	if !c.ChatTemplate {
		if c.SystemPrompt != "" {
			v.fail("system_prompt", "is only used with chat_template: true")
		}
		if c.ChatTemplateKwargs != "" {
			v.fail("chat_template_kwargs", "is only used with chat_template: true")
		}
	}
	if c.ChatTemplateKwargs != "" {
		if _, err := c.TemplateKwargs(); err != nil {
			v.fail("chat_template_kwargs", "%v", err)
		}
	}
	c.Env.validate(&v, c)
	if r := c.RoutedExperts; r.Enabled && r != (RoutedExpertsConfig{Enabled: true}) {
		// all three zero: the shape comes from the run's Hugging Face
		// model (validatePolicyRoutes)
		v.atLeast("routed_experts.layers", int64(r.Layers), 1)
		v.atLeast("routed_experts.top_k", int64(r.TopK), 1)
		v.atLeast("routed_experts.num_experts", int64(r.NumExperts), int64(max(1, r.TopK)))
	}
	return v.err()
}

// TemplateKwargs decodes chat_template_kwargs (nil when empty).
func (c RolloutConfig) TemplateKwargs() (map[string]json.RawMessage, error) {
	if c.ChatTemplateKwargs == "" {
		return nil, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(c.ChatTemplateKwargs), &m); err != nil || m == nil {
		return nil, fmt.Errorf("must be a JSON object, e.g. {\"enable_thinking\": false}: %q", c.ChatTemplateKwargs)
	}
	return m, nil
}

// validateChat: chat_template needs the model's tokenizer directory.
func (c Config) validateChat() error {
	if !c.Rollout.ChatTemplate {
		return nil
	}
	v := checker{section: "rollout"}
	if !c.Model.HF() && (len(c.Engines.External) == 0 || c.Engines.External[0].Tokenizer == "") {
		v.fail("chat_template", "needs the model's Hugging Face tokenizer directory (with tokenizer_config.json's chat_template or chat_template.jinja): set model.path (its tokenizer files) or engines.external[].tokenizer")
	}
	return v.err()
}
