package config

import (
	"net/url"
	"time"
)

// EnvProtocol says where a run's episodes come from (rollout.env.protocol).
type EnvProtocol string

// Environment protocols.
const (
	// EnvTask: rollout.task names a registered task (built-in, or a chat
	// environment such as calculator).
	EnvTask EnvProtocol = "task"
	// EnvChatHTTP: asyncrl's chat-environment server at urls[0]
	// (tasks/chatenv's wire form; integrations/envs serves SkyRL-Gym
	// BaseTextEnv environments with it).
	EnvChatHTTP EnvProtocol = "chat_http"
	// EnvOpenEnv: OpenEnv environment servers (one episode each at a time).
	EnvOpenEnv EnvProtocol = "openenv"
)

// Values lists the protocols.
func (EnvProtocol) Values() []string { return []string{"task", "chat_http", "openenv"} }

// ToolFormat is how the model writes tool calls (tasks/chatenv).
type ToolFormat string

// Values lists the tool-call formats.
func (ToolFormat) Values() []string { return []string{"none", "hermes", "llama3"} }

// RolloutEnvConfig is rollout.env: where chat environments live and how
// the rollout talks to them (docs/environments.md).
type RolloutEnvConfig struct {
	Protocol EnvProtocol `yaml:"protocol" doc:"task (rollout.task is a registered task), chat_http (asyncrl's chat-environment server at urls[0], e.g. python3 -m asyncrl_envs serving a SkyRL-Gym env) or openenv (OpenEnv servers at urls, one episode each at a time)"`
	// URLs are the environment servers.
	URLs []string `yaml:"urls" doc:"environment server base URLs (chat_http: one; openenv: a pool, one episode per server at a time)"`
	// ToolFormat parses the model's tool calls in chat environments.
	ToolFormat ToolFormat `yaml:"tool_format" doc:"how the model writes tool calls: hermes (Qwen3's <tool_call>{json}</tool_call>), llama3 (Llama-3.1 JSON {\"name\", \"parameters\"}) or none"`
	// StepTimeout bounds each reset and step of a chat environment.
	StepTimeout time.Duration `yaml:"step_timeout" doc:"bound on one environment reset or step; past it the trajectory is aborted (reason env_timeout) and its group requeued"`
	// ActionField and ObservationField map OpenEnv's typed actions and
	// observations to text.
	ActionField      string `yaml:"action_field" doc:"openenv: the action's text field for a turn without tool calls (EchoAction: message)"`
	ObservationField string `yaml:"observation_field" doc:"openenv: the observation's text field shown to the model (\"\" = the observation as JSON)"`
}

// DefaultRolloutEnv: registered tasks, Hermes tool calls, 30 s per call.
func DefaultRolloutEnv() RolloutEnvConfig {
	return RolloutEnvConfig{Protocol: EnvTask, URLs: []string{}, ToolFormat: "hermes", StepTimeout: 30 * time.Second, ActionField: "message"}
}

// validate checks rollout.env under v (section rollout).
func (c RolloutEnvConfig) validate(v *checker, ro RolloutConfig) {
	e := checker{section: "rollout.env"}
	e.checkEnums(c)
	e.positiveDuration("step_timeout", c.StepTimeout)
	switch c.Protocol {
	case EnvTask:
		if len(c.URLs) > 0 {
			e.fail("urls", "are only used with protocol chat_http or openenv")
		}
	case EnvChatHTTP:
		if len(c.URLs) != 1 {
			e.fail("urls", "protocol chat_http takes exactly one server URL, got %d", len(c.URLs))
		}
	case EnvOpenEnv:
		if len(c.URLs) == 0 {
			e.fail("urls", "protocol openenv needs at least one server URL")
		}
		if ro.MaxTurns < 1 || ro.MaxTokens < 1 {
			v.fail("max_turns", "protocol openenv needs rollout.max_turns and rollout.max_tokens ≥ 1 (OpenEnv servers do not say their limits)")
		}
		if c.ActionField == "" {
			e.fail("action_field", "protocol openenv needs the action's text field (EchoAction: message)")
		}
	}
	for i, u := range c.URLs {
		if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			e.fail("urls", "[%d] %q: want http(s)://host[:port]", i, u)
		}
	}
	v.errs = append(v.errs, e.errs...)
}
