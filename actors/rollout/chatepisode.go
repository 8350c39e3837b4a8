package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/asyncrl/asyncrl/tasks"
	"github.com/asyncrl/asyncrl/tasks/chatenv"
)

// Environment failures. An episode aborted by its environment returns an
// error wrapping ErrAborted and one of these, so the actor counts the
// reason (Stats.EnvErrors, Stats.EnvTimeouts) and the group is requeued
// like any aborted group.
var (
	// ErrEnvFailed: the environment's Reset or Step failed (an error, a
	// server that died or answered garbage, a NaN reward).
	ErrEnvFailed = errors.New("rollout: environment failed")
	// ErrEnvTimeout: the environment did not answer within
	// EpisodeConfig.EnvTimeout (a hung server or tool).
	ErrEnvTimeout = errors.New("rollout: environment timed out")
)

// MessageChat is one chat episode driven by whole messages (a
// chatenv.Env's): token-in/token-out as Chat, the messages rendered with
// the model's chat template.
type MessageChat interface {
	// OpenWith returns the prompt: the opening messages with the
	// generation prompt.
	OpenWith(msgs []chatenv.Message) ([]int32, error)
	// ContinueWith returns what follows the model's turn (its generated
	// ids, exactly as sampled): the end of the assistant turn the model did
	// not generate, the next messages, the generation prompt.
	ContinueWith(generated []int32, next []chatenv.Message) ([]int32, error)
}

// MessageChatFormat is a ChatFormat that can also start message-driven
// episodes announcing tools (the run's chat template; wiring).
type MessageChatFormat interface {
	NewMessageChat(tools json.RawMessage) (MessageChat, error)
}

// runChatEpisode plays one episode of a chat environment: the opening
// messages are rendered once; every turn the model's text is parsed for
// tool calls (EpisodeConfig.ToolFormat), the assistant message goes to
// the environment, and the messages it returns are rendered and appended
// as context (loss mask 0) after the model's own tokens (loss mask 1),
// never re-tokenising the history. A turn whose tool calls are malformed
// is answered by an error message to the model (role "tool"), without a
// step of the environment. An environment that fails or runs past
// EnvTimeout aborts the episode with ErrEnvFailed or ErrEnvTimeout.
func runChatEpisode(ctx context.Context, gen Generator, task chatenv.Task, p tasks.Prompt, id string, cfg EpisodeConfig) (Episode, error) {
	env := task.NewChatEnv()
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), envCloseTimeout)
		_ = callEnv(cctx, 0, env.Close)
		cancel()
	}()
	var start chatenv.Start
	if err := callEnv(ctx, cfg.EnvTimeout, func(c context.Context) (err error) {
		start, err = env.Reset(c, p)
		return err
	}); err != nil {
		return Episode{}, envAbort(ctx, "reset", p.ID, err)
	}
	maxTurns, maxTok := task.MaxTurns(), task.MaxTokensPerTurn()
	if cfg.MaxTurns > 0 {
		maxTurns = cfg.MaxTurns
	}
	if cfg.MaxTokens > 0 {
		maxTok = cfg.MaxTokens
	}
	render, err := newMessageContext(cfg, start.Tools)
	if err != nil {
		return Episode{}, fmt.Errorf("%w: %s: %w", ErrAborted, p.ID, err)
	}
	ep := Episode{ID: id}
	first, err := render.open(start.Messages)
	if err != nil {
		return Episode{}, fmt.Errorf("%w: %s: chat template: %w", ErrAborted, p.ID, err)
	}
	ep.addContext(first)
	ep.PromptLen = len(ep.Tokens)
	for turn := 0; turn < maxTurns && len(ep.Tokens) < cfg.MaxSeqLen; turn++ {
		at := len(ep.Tokens)
		if err := generateTurn(ctx, gen, &ep, min(maxTok, cfg.MaxSeqLen-len(ep.Tokens)), cfg); err != nil {
			return Episode{}, err
		}
		ep.Turns++
		next, done, err := chatTurn(ctx, env, &ep, cfg.vocab().Decode(ep.Tokens[at:]), cfg)
		if err != nil {
			return Episode{}, envAbort(ctx, "step", p.ID, err)
		}
		if done {
			break
		}
		ids, err := render.next(ep.Tokens[at:], next)
		if err != nil {
			return Episode{}, fmt.Errorf("%w: %s: chat template: %w", ErrAborted, p.ID, err)
		}
		ep.addContext(ids)
	}
	ep.finish(cfg)
	return ep, nil
}

// envCloseTimeout bounds the Close of an episode's environment.
const envCloseTimeout = 2 * time.Second

// chatTurn turns the model's text into the next messages: the errors of
// malformed tool calls, or the environment's step (its reward added to
// the episode).
func chatTurn(ctx context.Context, env chatenv.Env, ep *Episode, text string, cfg EpisodeConfig) ([]chatenv.Message, bool, error) {
	msg, bad := chatenv.ParseToolCalls(cfg.ToolFormat, text)
	ep.ToolCalls += len(msg.ToolCalls) + len(bad)
	ep.MalformedCalls += len(bad)
	if len(bad) > 0 {
		return malformedReplies(bad), false, nil
	}
	var res chatenv.Result
	err := callEnv(ctx, cfg.EnvTimeout, func(c context.Context) (err error) {
		res, err = env.Step(c, chatenv.Action{Message: msg, Text: text})
		return err
	})
	if err != nil {
		return nil, false, err
	}
	if math.IsNaN(res.Reward) || math.IsInf(res.Reward, 0) {
		return nil, false, fmt.Errorf("reward %v is not a number", res.Reward)
	}
	ep.Reward += res.Reward
	ep.ToolTimeouts += metaCount(res.Metadata, chatenv.MetaToolTimeouts)
	if !res.Done && len(res.Messages) == 0 {
		return nil, false, errors.New("a step that is not done returned no messages: nothing to show the model")
	}
	return res.Messages, res.Done, nil
}

// metaCount reads a count from an environment's metadata: an int from a
// Go environment, a float64 from JSON; anything else counts 0.
func metaCount(meta map[string]any, key string) int {
	switch v := meta[key].(type) {
	case int:
		return max(v, 0)
	case float64:
		if v > 0 && v < 1<<31 {
			return int(v)
		}
	}
	return 0
}

// malformedReplies answers each malformed call with a tool message saying
// what is wrong and what the right form is, so the model can try again.
func malformedReplies(bad []chatenv.CallError) []chatenv.Message {
	out := make([]chatenv.Message, 0, len(bad))
	for _, e := range bad {
		out = append(out, chatenv.Message{Role: "tool", Name: "error",
			Content: "error: " + e.Error() + `; write {"name": <tool>, "arguments": {…}} as JSON`})
	}
	return out
}

// callEnv runs f with a deadline of timeout (0: ctx's own) and gives up
// on it when the deadline passes even if f ignores its context (an
// in-process environment stuck in a loop: its goroutine is left to finish
// on its own, the episode does not wait for it).
func callEnv(ctx context.Context, timeout time.Duration, f func(context.Context) error) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	done := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("environment panicked: %v", r)
			}
		}()
		done <- f(ctx)
	}()
	select {
	case err := <-done:
		if err != nil && ctx.Err() != nil {
			return fmt.Errorf("%w: %w", ctx.Err(), err)
		}
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// envAbort wraps an environment failure: ErrEnvTimeout when the deadline
// passed (and not because the whole run stopped), else ErrEnvFailed.
func envAbort(ctx context.Context, what, promptID string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	kind := ErrEnvFailed
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, chatenv.ErrTimeout) {
		kind = ErrEnvTimeout
	}
	return fmt.Errorf("%w: %w: %s of %s: %w", ErrAborted, kind, what, promptID, err)
}

// messageContext renders messages into context tokens: the chat template
// (a MessageChat), or, for a model without one (the built-in policy), the
// messages' contents encoded one after the other.
type messageContext struct {
	vocab Vocabulary
	chat  MessageChat
}

func newMessageContext(cfg EpisodeConfig, tools json.RawMessage) (messageContext, error) {
	m := messageContext{vocab: cfg.vocab()}
	if cfg.Chat == nil {
		return m, nil
	}
	f, ok := cfg.Chat.(MessageChatFormat)
	if !ok {
		return m, fmt.Errorf("the chat format %T cannot render a chat environment's messages", cfg.Chat)
	}
	c, err := f.NewMessageChat(tools)
	if err != nil {
		return m, err
	}
	m.chat = c
	return m, nil
}

func (m messageContext) open(msgs []chatenv.Message) ([]int32, error) {
	if len(msgs) == 0 {
		return nil, errors.New("the environment's reset returned no messages")
	}
	if m.chat != nil {
		return m.chat.OpenWith(msgs)
	}
	return append(append([]int32(nil), m.vocab.Prefix()...), m.vocab.Encode(plainText(msgs))...), nil
}

func (m messageContext) next(generated []int32, msgs []chatenv.Message) ([]int32, error) {
	if m.chat != nil {
		return m.chat.ContinueWith(generated, msgs)
	}
	return m.vocab.Encode(plainText(msgs)), nil
}

// plainText is the messages without a template: their contents, in order.
func plainText(msgs []chatenv.Message) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString(m.Content)
	}
	return b.String()
}

// countEnvFailure counts an aborted episode's environment reason.
func (a *Actor) countEnvFailure(err error) {
	switch {
	case errors.Is(err, ErrEnvTimeout):
		a.c.envTimeouts.Add(1)
	case errors.Is(err, ErrEnvFailed):
		a.c.envErrors.Add(1)
	}
}
