package wiring

import (
	"context"
	"fmt"
	"time"

	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/tasks"
	"github.com/asyncrl/asyncrl/tasks/chatenv"
	_ "github.com/asyncrl/asyncrl/tasks/multihop" // registers the multi-hop retrieval environment
	"github.com/asyncrl/asyncrl/tasks/openenv"
	_ "github.com/asyncrl/asyncrl/tasks/toolenv" // registers the calculator tool environment
)

// EnvTask is the run's task under rollout.env: the registered rollout.task
// (protocol task), the chat-environment server at urls[0] (chat_http), or
// the OpenEnv server pool (openenv, named rollout.task). Remote servers
// are contacted once here, so a wrong URL fails the start naming it.
func EnvTask(ro config.RolloutConfig) (tasks.Task, error) {
	e := ro.Env
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch e.Protocol {
	case config.EnvChatHTTP:
		c, err := chatenv.Dial(ctx, e.URLs[0], chatenv.DefaultClientConfig())
		if err != nil {
			return nil, fmt.Errorf("rollout.env.urls: %w", err)
		}
		return c, nil
	case config.EnvOpenEnv:
		t, err := openenv.New(ctx, openenv.Config{Name: ro.Task, URLs: e.URLs, MaxTurns: ro.MaxTurns, MaxTokensPerTurn: ro.MaxTokens,
			ActionField: e.ActionField, ObservationField: e.ObservationField, StepTimeoutS: int(e.StepTimeout / time.Second)})
		if err != nil {
			return nil, fmt.Errorf("rollout.env.urls: %w", err)
		}
		return t, nil
	default:
		return tasks.Get(ro.Task)
	}
}
