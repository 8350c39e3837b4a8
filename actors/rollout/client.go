package rollout

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/asyncrl/asyncrl/engine"
)

// ErrEngine wraps failures of one generation call (transport errors,
// non-200 answers, malformed bodies); the episode runner retries them.
var ErrEngine = errors.New("rollout: engine call failed")

// TurnRequest is one generation call: continue Tokens by at most
// MaxTokens tokens.
type TurnRequest struct {
	// SessionID is sent as X-Session-ID (the trajectory id), so the router
	// keeps the trajectory on one engine (prefix cache) across turns.
	SessionID   string
	Tokens      []int32
	MaxTokens   int
	Temperature float64
	TopP        float64
	TopK        int
}

// TurnOutput is what the engine generated.
type TurnOutput struct {
	Tokens   []int32
	Logprobs []float32
	// Versions is the policy version of every generated token.
	Versions []int64
	// Support is the sample support set of every token (nil when the
	// engine applied no top-k/top-p filter).
	Support [][]int32
	// SupportLogprobs is every token's logprob renormalised over its
	// support set (the engine's output_support_logprobs); nil when the
	// engine sent none (no filter active, or an engine without the field).
	SupportLogprobs []float32
	// Finish is the engine's finish_reason: stop, length or abort.
	Finish string
	// Engine is the replica that answered (X-Asyncrl-Replica), for logs.
	Engine string
}

// Generator runs one generation call. The HTTP client is the production
// one; tests substitute fakes.
type Generator interface {
	Generate(ctx context.Context, req TurnRequest) (TurnOutput, error)
	// FinishSession releases the trajectory's router session.
	FinishSession(ctx context.Context, sessionID string) error
}

// HTTPClient calls a vLLM-compatible /v1/completions endpoint (the router,
// or one engine) with token-id prompts.
type HTTPClient struct {
	// BaseURL is the router's (or engine's) base URL, e.g. http://127.0.0.1:8000.
	BaseURL string
	// Model is the served model name sent in every request.
	Model string
	// Client sends the requests; nil uses a client without proxies.
	Client *http.Client
}

var _ Generator = (*HTTPClient)(nil)

func (c *HTTPClient) client() *http.Client {
	if c.Client != nil {
		return c.Client
	}
	return defaultClient
}

var defaultClient = &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 256}}

type completionBody struct {
	Model          string  `json:"model"`
	Prompt         []int32 `json:"prompt"`
	MaxTokens      int     `json:"max_tokens"`
	Temperature    float64 `json:"temperature"`
	TopP           float64 `json:"top_p"`
	TopK           int     `json:"top_k"`
	ReturnTokenIDs bool    `json:"return_token_ids"`
}

// Generate posts one completion request and decodes the asyncrl
// extensions (token ids, output logprobs, token versions, support sets and
// support-normalised logprobs).
func (c *HTTPClient) Generate(ctx context.Context, req TurnRequest) (TurnOutput, error) {
	body, err := json.Marshal(completionBody{Model: c.Model, Prompt: req.Tokens, MaxTokens: req.MaxTokens,
		Temperature: req.Temperature, TopP: req.TopP, TopK: req.TopK, ReturnTokenIDs: true})
	if err != nil {
		return TurnOutput{}, err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(c.BaseURL, "/")+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return TurnOutput{}, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("X-Session-ID", req.SessionID)
	resp, err := c.client().Do(hreq)
	if err != nil {
		return TurnOutput{}, fmt.Errorf("%w: %w", ErrEngine, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return TurnOutput{}, fmt.Errorf("%w: read body: %w", ErrEngine, err)
	}
	if resp.StatusCode != http.StatusOK {
		return TurnOutput{}, fmt.Errorf("%w: HTTP %d: %s", ErrEngine, resp.StatusCode, bytes.TrimSpace(data))
	}
	var cr engine.CompletionResponse
	if err := json.Unmarshal(data, &cr); err != nil {
		return TurnOutput{}, fmt.Errorf("%w: decode response: %w", ErrEngine, err)
	}
	if len(cr.Choices) != 1 {
		return TurnOutput{}, fmt.Errorf("%w: %d choices, want 1", ErrEngine, len(cr.Choices))
	}
	ch := cr.Choices[0]
	out := TurnOutput{Tokens: ch.TokenIDs, Logprobs: ch.OutputLogprobs, Versions: ch.TokenWeightVersions,
		Support: ch.SampleSupport, SupportLogprobs: ch.OutputSupportLogprobs, Engine: resp.Header.Get("X-Asyncrl-Replica")}
	if ch.FinishReason != nil {
		out.Finish = *ch.FinishReason
	}
	n := len(out.Tokens)
	if len(out.Logprobs) != n || len(out.Versions) != n || (out.Support != nil && len(out.Support) != n) ||
		(out.SupportLogprobs != nil && len(out.SupportLogprobs) != n) {
		return TurnOutput{}, fmt.Errorf("%w: %d tokens but %d logprobs, %d versions, %d support rows, %d support logprobs",
			ErrEngine, n, len(out.Logprobs), len(out.Versions), len(out.Support), len(out.SupportLogprobs))
	}
	return out, nil
}

// FinishSession posts /finish_session?session_id=… (SkyRL's release of a
// sticky session). Engines without the route answer 404, which is fine.
func (c *HTTPClient) FinishSession(ctx context.Context, sessionID string) error {
	u := strings.TrimRight(c.BaseURL, "/") + "/finish_session?session_id=" + url.QueryEscape(sessionID)
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return err
	}
	resp, err := c.client().Do(hreq)
	if err != nil {
		return fmt.Errorf("rollout: finish session %s: %w", sessionID, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil
}
