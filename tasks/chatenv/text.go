package chatenv

import (
	"context"
	"strings"
	"time"

	"github.com/asyncrl/asyncrl/tasks"
)

// TextEnv is the text-level view of a chat episode, for code that drives
// tasks.Env (asyncrl env list, demos, the text protocol of httpenv): Reset
// gives the opening messages' contents, Step sends the text as the
// assistant message (tool calls parsed with format) and gives back the new
// messages' contents. Every call is bounded by timeout. The rollout does
// not use it: it plays a Task's chat episodes directly.
func TextEnv(env Env, format ToolFormat, timeout time.Duration) tasks.Env {
	return &textEnv{env: env, format: format, timeout: timeout}
}

type textEnv struct {
	env     Env
	format  ToolFormat
	timeout time.Duration
}

func (t *textEnv) Reset(p tasks.Prompt) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), t.timeout)
	defer cancel()
	s, err := t.env.Reset(ctx, p)
	if err != nil {
		return "", err
	}
	return contents(s.Messages), nil
}

func (t *textEnv) Step(action string) (string, float64, bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), t.timeout)
	defer cancel()
	msg, _ := ParseToolCalls(t.format, action)
	r, err := t.env.Step(ctx, Action{Message: msg, Text: action})
	if err != nil {
		return "", 0, false, err
	}
	if r.Done {
		_ = t.env.Close(ctx)
	}
	return contents(r.Messages), r.Reward, r.Done, nil
}

func contents(msgs []Message) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString(m.Content)
	}
	return b.String()
}
