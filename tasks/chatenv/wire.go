package chatenv

import (
	"github.com/asyncrl/asyncrl/tasks/httpenv"
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
//
// The paths, /info and /reset's request are httpenv's: the chat wire form
// is that protocol with messages in place of strings.
const (
	PathInfo  = httpenv.PathInfo
	PathReset = httpenv.PathReset
	PathStep  = httpenv.PathStep
	PathClose = httpenv.PathClose
)

// Info is GET /info (name and limits, as httpenv's).
type Info = httpenv.Info

// ResetRequest is POST /reset's body (the prompt, as httpenv's).
type ResetRequest = httpenv.ResetRequest

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
