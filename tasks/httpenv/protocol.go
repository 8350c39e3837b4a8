package httpenv

import (
	"fmt"
	"math/rand/v2"

	"github.com/asyncrl/asyncrl/tasks"
)

// Paths of the protocol.
const (
	PathInfo  = "/info"
	PathReset = "/reset"
	PathStep  = "/step"
	PathClose = "/close"
)

// Info is the body of GET /info.
type Info struct {
	Name             string `json:"name"`
	MaxTurns         int    `json:"max_turns"`
	MaxTokensPerTurn int    `json:"max_tokens_per_turn"`
}

// Valid reports whether the server named itself and gave positive limits.
func (i Info) Valid() bool { return i.Name != "" && i.MaxTurns >= 1 && i.MaxTokensPerTurn >= 1 }

// SeedPrompt is a client's Sample: a seed only, the prompt's Text empty
// (the server generates it from the seed on reset), so Sample stays free
// of I/O as the Task contract asks.
func (i Info) SeedPrompt(rng *rand.Rand) tasks.Prompt {
	seed := rng.Int64()
	return tasks.Prompt{ID: fmt.Sprintf("%s-%016x", i.Name, uint64(seed)), Seed: seed}
}

// ResetRequest is the body of POST /reset.
type ResetRequest struct {
	Prompt tasks.Prompt `json:"prompt"`
}

// ResetResponse answers POST /reset.
type ResetResponse struct {
	EpisodeID   string `json:"episode_id"`
	Observation string `json:"observation"`
}

// StepRequest is the body of POST /step.
type StepRequest struct {
	EpisodeID string `json:"episode_id"`
	Action    string `json:"action"`
}

// StepResponse answers POST /step.
type StepResponse struct {
	Observation string  `json:"observation"`
	Reward      float64 `json:"reward"`
	Done        bool    `json:"done"`
}

// CloseRequest is the body of POST /close: the client abandons an episode
// before it is done, so the server can free it now rather than at its TTL.
type CloseRequest struct {
	EpisodeID string `json:"episode_id"`
}

// ErrorResponse is the body of every non-2xx answer.
type ErrorResponse struct {
	// Error is a human-readable message.
	Error string `json:"error"`
	// Code is one of the Code… constants, so clients can branch without
	// parsing messages.
	Code string `json:"code"`
}

// Error codes.
const (
	CodeBadRequest      = "bad_request"        // 400: malformed JSON, unknown field, missing episode_id
	CodeBadPrompt       = "bad_prompt"         // 400: the task rejected the prompt (tasks.ErrBadPrompt)
	CodeEnvError        = "env_error"          // 400: the env's Step failed
	CodeUnknownEpisode  = "unknown_episode"    // 404: never issued, finished, closed or expired
	CodeNotFound        = "not_found"          // 404: no such path
	CodeMethod          = "method_not_allowed" // 405
	CodeTooLarge        = "too_large"          // 413: body over the server's limit
	CodeTooManyEpisodes = "too_many_episodes"  // 503: MaxEpisodes live episodes
	CodeInternal        = "internal"           // 500: the env returned something unencodable (NaN reward)
)
