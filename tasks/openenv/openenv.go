// Package openenv plugs OpenEnv environment servers (meta-pytorch/OpenEnv)
// into asyncrl's chat-environment contract (tasks/chatenv).
//
// # Wire form (from OpenEnv's source)
//
// Read from src/core/env_server/http_server.py (HTTPEnvServer.register_routes,
// _serialize_observation) and src/core/http_env_client.py (HTTPEnvClient
// reset/step/state) at meta-pytorch/OpenEnv@8a195a24f73bda89264cf92a21dc3f3f09557dfd
// and @11663f4dcc0fc34dd94d0788f602daf88da1c019, and the types of
// src/core/env_server/types.py (Observation: done, reward, metadata;
// ToolCallAction: tool_name, parameters; State: episode_id, step_count)
// at @7676e140389ebb2f1610e063821fa25bbbbc404d:
//
//	POST /reset  {}                                   → {"observation": {...}, "reward": r|null, "done": bool}
//	POST /step   {"action": {...}, "timeout_s": n}    → {"observation": {...}, "reward": r|null, "done": bool}
//	GET  /state                                       → {"episode_id": "…", "step_count": n, ...}
//	GET  /health                                      → {"status": "healthy"}
//
// A step that fails is a 4xx/5xx with FastAPI's {"detail": "…"}. One
// server holds one environment, so one episode at a time: the Task leases
// each of its server URLs to one episode (Config.URLs is the pool; a
// rollout's concurrency beyond it waits for a free server within the
// episode's deadline).
//
// # Mapping to chat messages
//
//   - The opening messages are Config.System (if set) and a user message
//     holding the reset observation (Config.ObservationField's string, or
//     the observation object as JSON).
//   - An assistant message with tool calls is sent as OpenEnv's
//     ToolCallAction, {"tool_name", "parameters"}, one step per call; each
//     observation comes back as a tool message. A message without calls is
//     sent as {Config.ActionField: text} (EchoAction's "message" by
//     default) and its observation comes back as a user message.
//   - reward null counts 0; the episode score is the sum of the steps'.
//   - When the episode ends, GET /state is read into the result's metadata.
package openenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/asyncrl/asyncrl/tasks"
	"github.com/asyncrl/asyncrl/tasks/chatenv"
)

// Config configures an OpenEnv Task.
type Config struct {
	// Name is the task's name in logs and reports.
	Name string
	// URLs are the environment servers (one episode each at a time).
	URLs []string
	// MaxTurns and MaxTokensPerTurn bound an episode (OpenEnv has no
	// /info to say them).
	MaxTurns, MaxTokensPerTurn int
	// System is the opening system message ("" = none).
	System string
	// ActionField is the action's text field (EchoAction: "message").
	ActionField string
	// ObservationField is the observation's text field ("" = the whole
	// observation as JSON; EchoObservation: "echoed_message").
	ObservationField string
	// StepTimeoutS is sent as the step's timeout_s (the server's own bound).
	StepTimeoutS int
	// HTTPClient makes the requests (nil: one of its own).
	HTTPClient *http.Client
}

// Task is an OpenEnv server pool as a chatenv.Task.
type Task struct {
	cfg  Config
	hc   *http.Client
	free chan string
}

var _ chatenv.Task = (*Task)(nil)

// New checks every server's GET /health and returns the pool as a Task.
func New(ctx context.Context, cfg Config) (*Task, error) {
	if cfg.Name == "" || len(cfg.URLs) == 0 || cfg.MaxTurns < 1 || cfg.MaxTokensPerTurn < 1 {
		return nil, fmt.Errorf("openenv: config needs a name, at least one URL and positive max_turns/max_tokens_per_turn (got %+v)", cfg)
	}
	if cfg.ActionField == "" {
		cfg.ActionField = "message"
	}
	t := &Task{cfg: cfg, hc: cfg.HTTPClient, free: make(chan string, len(cfg.URLs))}
	if t.hc == nil {
		t.hc = &http.Client{}
	}
	for _, u := range cfg.URLs {
		u = strings.TrimSuffix(u, "/")
		var h struct {
			Status string `json:"status"`
		}
		if err := chatenv.PostJSON(ctx, t.hc, http.MethodGet, u+"/health", 1<<16, nil, &h); err != nil {
			return nil, fmt.Errorf("openenv: %s is not an OpenEnv server answering /health: %w", u, err)
		}
		t.free <- u
	}
	return t, nil
}

// Name implements tasks.Task.
func (t *Task) Name() string { return t.cfg.Name }

// MaxTurns implements tasks.Task.
func (t *Task) MaxTurns() int { return t.cfg.MaxTurns }

// MaxTokensPerTurn implements tasks.Task.
func (t *Task) MaxTokensPerTurn() int { return t.cfg.MaxTokensPerTurn }

// Sample draws a seed (sent with reset; servers that read it use it).
func (t *Task) Sample(rng *rand.Rand) tasks.Prompt {
	seed := rng.Int64()
	return tasks.Prompt{ID: fmt.Sprintf("%s-%016x", t.cfg.Name, uint64(seed)), Seed: seed}
}

// NewEnv is the text-level view (chatenv.TextEnv).
func (t *Task) NewEnv() tasks.Env {
	return chatenv.TextEnv(t.NewChatEnv(), chatenv.ToolsNone, time.Minute)
}

// NewChatEnv returns an episode; it leases a server on Reset.
func (t *Task) NewChatEnv() chatenv.Env { return &env{t: t} }

// reply is OpenEnv's serialised observation.
type reply struct {
	Observation map[string]any `json:"observation"`
	Reward      *float64       `json:"reward"`
	Done        bool           `json:"done"`
}

type env struct {
	t    *Task
	url  string
	done bool
}

func (e *env) Reset(ctx context.Context, p tasks.Prompt) (chatenv.Start, error) {
	if e.url == "" {
		select {
		case e.url = <-e.t.free:
		case <-ctx.Done():
			return chatenv.Start{}, fmt.Errorf("%w: no free OpenEnv server of %d (one episode each): %w", chatenv.ErrTimeout, len(e.t.cfg.URLs), ctx.Err())
		}
	}
	var r reply
	if err := chatenv.PostJSON(ctx, e.t.hc, http.MethodPost, e.url+"/reset", 4<<20, map[string]any{"seed": p.Seed}, &r); err != nil {
		return chatenv.Start{}, err
	}
	var msgs []chatenv.Message
	if e.t.cfg.System != "" {
		msgs = append(msgs, chatenv.Message{Role: "system", Content: e.t.cfg.System})
	}
	text, err := e.text(r.Observation)
	if err != nil {
		return chatenv.Start{}, err
	}
	return chatenv.Start{Messages: append(msgs, chatenv.Message{Role: "user", Content: text})}, nil
}

func (e *env) Step(ctx context.Context, a chatenv.Action) (chatenv.Result, error) {
	if e.url == "" {
		return chatenv.Result{}, tasks.ErrNotReset
	}
	var res chatenv.Result
	if len(a.Message.ToolCalls) == 0 {
		r, err := e.step(ctx, map[string]any{e.t.cfg.ActionField: a.Text})
		if err != nil {
			return res, err
		}
		text, err := e.text(r.Observation)
		res.Messages = []chatenv.Message{{Role: "user", Content: text}}
		return e.account(ctx, res, r), err
	}
	for _, c := range a.Message.ToolCalls {
		var params map[string]any
		if err := json.Unmarshal(c.Function.Arguments, &params); err != nil {
			return res, fmt.Errorf("%w: tool call %s: %w", chatenv.ErrEnv, c.ID, err)
		}
		r, err := e.step(ctx, map[string]any{"tool_name": c.Function.Name, "parameters": params})
		if err != nil {
			return res, err
		}
		text, err := e.text(r.Observation)
		if err != nil {
			return res, err
		}
		res.Messages = append(res.Messages, chatenv.Message{Role: "tool", ToolCallID: c.ID, Name: c.Function.Name, Content: text})
		if res = e.account(ctx, res, r); res.Done {
			break
		}
	}
	return res, nil
}

func (e *env) step(ctx context.Context, action map[string]any) (reply, error) {
	var r reply
	body := map[string]any{"action": action}
	if e.t.cfg.StepTimeoutS > 0 {
		body["timeout_s"] = e.t.cfg.StepTimeoutS
	}
	err := chatenv.PostJSON(ctx, e.t.hc, http.MethodPost, e.url+"/step", 4<<20, body, &r)
	return r, err
}

// account adds a step's reward and done, and on done reads /state.
func (e *env) account(ctx context.Context, res chatenv.Result, r reply) chatenv.Result {
	if r.Reward != nil {
		res.Reward += *r.Reward
	}
	if r.Done {
		res.Done, e.done = true, true
		if st, err := e.State(ctx); err == nil {
			res.Metadata = map[string]any{"state": st}
		}
	}
	return res
}

// State is GET /state of the episode's server.
func (e *env) State(ctx context.Context) (map[string]any, error) {
	var st map[string]any
	err := chatenv.PostJSON(ctx, e.t.hc, http.MethodGet, e.url+"/state", 1<<20, nil, &st)
	return st, err
}

// text is the observation as message content.
func (e *env) text(obs map[string]any) (string, error) {
	if f := e.t.cfg.ObservationField; f != "" {
		s, ok := obs[f].(string)
		if !ok {
			return "", fmt.Errorf("%w: the observation has no string field %q (set rollout.env.observation_field; it has %v)", chatenv.ErrEnv, f, keys(obs))
		}
		return s, nil
	}
	b, err := json.Marshal(obs)
	if err != nil {
		return "", errors.Join(chatenv.ErrEnv, err)
	}
	return string(b), nil
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// Close gives the server back to the pool.
func (e *env) Close(context.Context) error {
	if e.url != "" {
		e.t.free <- e.url
		e.url = ""
	}
	return nil
}
