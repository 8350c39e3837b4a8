package chatenv

import (
	"github.com/asyncrl/asyncrl/tasks"
)

// The wire form of this contract over HTTP (JSON bodies, one object each;
// integrations/envs serves it for SkyRL-Gym environments; Client speaks
// it):
//
//	GET  /info  → {"name": "calc", "max_turns": 6, "max_tokens_per_turn": 256}
//	POST /reset {"prompt": {"id", "text", "seed"}}
//	            → {"episode_id": "…", "messages": [Message…], "tools": [...], "metadata": {…}}
//	POST /step  {"episode_id": "…", "action": {"message": Message, "text": "…"}}
//	            → {"messages": [Message…], "reward": 0.5, "done": false, "metadata": {…}}
//	POST /close {"episode_id": "…"} → {}
//
// A non-2xx answer is {"error": "<message>"}; it fails the trajectory
// (ErrEnv). Messages are the OpenAI shape of Message.
const (
	PathInfo  = "/info"
	PathReset = "/reset"
	PathStep  = "/step"
	PathClose = "/close"
)

// Info is GET /info.
type Info struct {
	Name             string `json:"name"`
	MaxTurns         int    `json:"max_turns"`
	MaxTokensPerTurn int    `json:"max_tokens_per_turn"`
}

// ResetRequest is POST /reset's body.
type ResetRequest struct {
	Prompt tasks.Prompt `json:"prompt"`
}

// ResetResponse is POST /reset's answer.
type ResetResponse struct {
	EpisodeID string `json:"episode_id"`
	Start
}

// StepRequest is POST /step's body.
type StepRequest struct {
	EpisodeID string `json:"episode_id"`
	Action    Action `json:"action"`
}

// CloseRequest is POST /close's body.
type CloseRequest struct {
	EpisodeID string `json:"episode_id"`
}

// ErrorResponse is the body of a non-2xx answer.
type ErrorResponse struct {
	Error string `json:"error"`
}
