package tasks

import (
	"fmt"
	"math/rand/v2"
)

// Demonstrator is a Task that can act in its own episodes with
// well-formed — not good — actions: the episodes of an SFT warm-up that
// teaches a model from random initialisation the task's answer format
// (a number, a move), leaving the strategy for RL to learn
// (docs/models.md).
type Demonstrator interface {
	Task
	// DemoAction draws an action for env's current state from rng.
	DemoAction(env Env, rng *rand.Rand) string
}

// Message is one chat message of a transcript (the OpenAI / Hugging Face
// chat shape a chat template renders).
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Transcript is one demonstrated episode as chat messages: the prompt's
// observation as the first user message, then each action as an
// assistant message and each reply as a user message, with the episode's
// score (the sum of its rewards). The last message is the assistant's (a
// final reply after the episode ends is not part of the conversation a
// model would be trained to continue).
type Transcript struct {
	Messages []Message `json:"messages"`
	Score    float64   `json:"score"`
}

// Demonstrate plays one episode of t on p with t's demonstration actions
// drawn from rng.
func Demonstrate(t Demonstrator, p Prompt, rng *rand.Rand) (Transcript, error) {
	env := t.NewEnv()
	obs, err := env.Reset(p)
	if err != nil {
		return Transcript{}, err
	}
	tr := Transcript{Messages: []Message{{Role: "user", Content: obs}}}
	for turn := 0; turn < t.MaxTurns(); turn++ {
		a := t.DemoAction(env, rng)
		tr.Messages = append(tr.Messages, Message{Role: "assistant", Content: a})
		obs, r, done, err := env.Step(a)
		if err != nil {
			return Transcript{}, fmt.Errorf("tasks: %s: demonstration turn %d: %w", t.Name(), turn+1, err)
		}
		tr.Score += r
		if done {
			return tr, nil
		}
		tr.Messages = append(tr.Messages, Message{Role: "user", Content: obs})
	}
	// MaxTurns passed without the task saying done: end on the
	// assistant's message all the same.
	tr.Messages = tr.Messages[:len(tr.Messages)-1]
	return tr, nil
}
