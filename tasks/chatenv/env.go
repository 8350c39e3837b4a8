package chatenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/asyncrl/asyncrl/model/chattemplate"
	"github.com/asyncrl/asyncrl/tasks"
)

// Sentinel errors. An error an Env returns is a failure of the
// environment (the rollout aborts the trajectory with it as the reason);
// a bad action of the model is not an error but a message back to it.
var (
	// ErrEnv wraps every failure of an environment: a Reset or Step that
	// failed, answered garbage, or did not answer in time.
	ErrEnv = errors.New("chatenv: environment failed")
	// ErrTimeout wraps an environment call that ran past its deadline
	// (it matches ErrEnv too).
	ErrTimeout = fmt.Errorf("%w: timed out", ErrEnv)
)

// Message is one chat message in the OpenAI shape the chat templates read
// (and SkyRL-Gym's observations and OpenEnv's chat messages use): role,
// content, an assistant's tool calls, a tool result's call id and name.
type Message struct {
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	Name       string     `json:"name,omitempty"`
}

// ToolCall is an assistant's call of a tool, {"id", "type": "function",
// "function": {"name", "arguments"}}: the chat template's own type, so a
// parsed call renders as the template expects it.
type ToolCall = chattemplate.ToolCall

// FunctionCall names a function and its arguments (a JSON object).
type FunctionCall = chattemplate.FunctionCall

// Start is what Reset returns: the messages the episode opens with
// (system, user, …; the rollout renders them with the chat template and
// the generation prompt) and the tool definitions the template announces
// (a JSON array in the OpenAI "tools" shape; empty = none).
type Start struct {
	Messages []Message       `json:"messages"`
	Tools    json.RawMessage `json:"tools,omitempty"`
	Metadata map[string]any  `json:"metadata,omitempty"`
}

// Action is the model's turn: the assistant message with its tool calls
// parsed from the text (Message.Content is the text outside the calls),
// and Text, the whole decoded turn as the model wrote it (what a
// text-level environment such as SkyRL-Gym's BaseTextEnv.step reads).
type Action struct {
	Message Message `json:"message"`
	Text    string  `json:"text"`
}

// Result is what Step returns: the messages to append (tool results, the
// next user turn; none when done), the step's reward (the episode score is
// the sum), whether the episode ended, and metadata for logs.
type Result struct {
	Messages []Message      `json:"messages"`
	Reward   float64        `json:"reward"`
	Done     bool           `json:"done"`
	Metadata map[string]any `json:"metadata,omitempty"`
}

// MetaToolTimeouts is the Result.Metadata key (an integer) under which an
// environment reports how many of the step's tool calls it cut off at a
// time limit (the calculator's sandbox: its wall clock or CPU seconds); the
// rollout sums it into the run's tool_calls_timed_out. A tool's time limit
// is the environment's business and answered to the model as a message;
// only an environment that itself does not answer aborts the trajectory.
const MetaToolTimeouts = "tool_timeouts"

// Env is one episode of a chat environment. One rollout owns one Env; it
// is not used concurrently. Every call takes the deadline the rollout
// gives it (rollout.env.step_timeout); an Env that blocks past it fails
// the trajectory with ErrTimeout.
type Env interface {
	Reset(ctx context.Context, p tasks.Prompt) (Start, error)
	Step(ctx context.Context, a Action) (Result, error)
	// Close releases the episode (a remote server's slot); it is called
	// once whatever happened, and may be called before the episode ended.
	Close(ctx context.Context) error
}

// Task is a kind of chat environment. It is a tasks.Task, so the registry,
// prompts, datasets and the rollout's bookkeeping treat it like any task;
// the rollout sees NewChatEnv and plays chat episodes (NewEnv is the
// text-level view of the same episode, see TextEnv).
type Task interface {
	tasks.Task
	NewChatEnv() Env
}
