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
	"slices"
	"strconv"
	"strings"

	"github.com/asyncrl/asyncrl/messages/vllmwire"
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
	// Routes, when its shape is set, asks for the routed experts of
	// positions [RoutesStart, prompt + generated − 1) (vLLM's
	// routed_experts_prompt_start: the rows the trajectory already holds).
	Routes      RouteSpec
	RoutesStart int
}

// RouteSpec is the served MoE model's routing shape; the zero value asks
// for no routes.
type RouteSpec struct {
	Layers, TopK, NumExperts int
}

// On reports whether routes are asked for.
func (r RouteSpec) On() bool { return r.Layers > 0 && r.TopK > 0 && r.NumExperts > 0 }

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
	// Routes holds the routed experts the engine returned for positions
	// [RoutesStart, RoutesStart + rows): C-order [rows, layers, top_k]
	// (nil when none were asked for or the engine sent none).
	Routes []int32
	// RoutesSliced: the engine answered the routes of every position from
	// 0 although RoutesStart > 0 was asked (it ignores
	// routed_experts_prompt_start) and Routes are the rows from
	// RoutesStart on, cut here.
	RoutesSliced bool
	// Finish is the engine's finish_reason: stop, length or abort.
	Finish string
	// Engine is the replica that answered (X-Asyncrl-Replica), for logs.
	Engine string

	// The undecoded replay fields, for replayFields.
	wireRoutes  *vllmwire.RoutedExperts
	topLogprobs []map[string]float64
}

// Generator runs one generation call. The HTTP client is the production
// one; tests substitute fakes.
type Generator interface {
	Generate(ctx context.Context, req TurnRequest) (TurnOutput, error)
	// FinishSession releases the trajectory's router session.
	FinishSession(ctx context.Context, sessionID string) error
}

// HTTPClient calls a vLLM-compatible /v1/completions endpoint (the router,
// or one engine) token-in/token-out: the prompt goes as token ids and the
// answer is read from choices[0].token_ids and the sampled tokens'
// logprobs, as vLLM returns them (see Generate).
type HTTPClient struct {
	// BaseURL is the router's (or engine's) base URL, e.g. http://127.0.0.1:8000.
	BaseURL string
	// Model is the served model name sent in every request (vLLM's
	// --served-model-name, or a LoRA adapter's name); empty omits the
	// field, and vLLM then serves its default model.
	Model string
	// Stop and StopTokenIDs end generation at these strings or token ids
	// (vLLM's stop and stop_token_ids; the model's EOS stops it anyway
	// unless the server ignores it). Empty sends none.
	Stop         []string
	StopTokenIDs []int32
	// Client sends the requests; nil uses a client without proxies.
	Client *http.Client
	// SupportFromLogprobs > 0 asks for that many top logprobs per token
	// and, when the answer has no sample_support, builds the support sets
	// (and support-normalised logprobs) from them (messages/vllmwire).
	SupportFromLogprobs int
	// Protocol is the engines' generation API: vLLM's /v1/completions
	// (the zero value) or SGLang's native /generate (sglang.go).
	Protocol Protocol
}

var _ Generator = (*HTTPClient)(nil)

func (c *HTTPClient) client() *http.Client {
	if c.Client != nil {
		return c.Client
	}
	return defaultClient
}

// defaultClient keeps at most 1,024 connections per host: with thousands
// of trajectories in flight, turns beyond them wait for a free connection
// instead of each taking a socket (issue 22: ~16k in flight ran out of
// file descriptors).
var defaultClient = &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 256, MaxConnsPerHost: 1024}}

// Router headers with the oldest and newest weight version the replica
// served while the call was on it (actors/router/proxy VersionMinHeader
// and VersionMaxHeader; the names are repeated here because rollout
// imports no router package).
const (
	versionMinHeader = "X-Asyncrl-Weight-Version-Min"
	versionMaxHeader = "X-Asyncrl-Weight-Version-Max"
)

type completionBody struct {
	Model        string   `json:"model,omitempty"`
	Prompt       []int32  `json:"prompt"`
	MaxTokens    int      `json:"max_tokens"`
	Temperature  float64  `json:"temperature"`
	TopP         float64  `json:"top_p"`
	TopK         int      `json:"top_k"`
	Stop         []string `json:"stop,omitempty"`
	StopTokenIDs []int32  `json:"stop_token_ids,omitempty"`
	// Logprobs 0 asks for the sampled token's logprob alone (no
	// alternatives) in choices[].logprobs.token_logprobs.
	Logprobs               int  `json:"logprobs"`
	ReturnTokenIDs         bool `json:"return_token_ids"`
	ReturnTokensAsTokenIDs bool `json:"return_tokens_as_token_ids"`
	// R3 (sent only when routes are asked for): SGLang's and the built-in
	// engine's per-request flag (vLLM returns routes whenever it runs with
	// --enable-return-routed-experts) and vLLM's prompt start.
	ReturnRoutedExperts      bool `json:"return_routed_experts,omitempty"`
	RoutedExpertsPromptStart int  `json:"routed_experts_prompt_start,omitempty"`
}

// completionAnswer is the part of a /v1/completions answer Generate reads:
// vLLM's fields, and the asyncrl engine's optional extensions.
type completionAnswer struct {
	Choices []completionChoice `json:"choices"`
	Usage   *struct {
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

// completionChoice is one choice of a completionAnswer.
type completionChoice struct {
	FinishReason   *string `json:"finish_reason"`
	TokenIDs       []int32 `json:"token_ids"`
	PromptTokenIDs []int32 `json:"prompt_token_ids"`
	Logprobs       *struct {
		// Entries are null where vLLM has no logprob (the first
		// prompt token in echo mode); never for a generated token.
		TokenLogprobs []*float64 `json:"token_logprobs"`
		// TopLogprobs are read only with SupportFromLogprobs.
		TopLogprobs []map[string]float64 `json:"top_logprobs"`
	} `json:"logprobs"`
	// RoutedExperts is vLLM's base64 .npy (or the {data, shape, dtype}
	// object), decoded only when routes were asked for.
	RoutedExperts *vllmwire.RoutedExperts `json:"routed_experts"`
	// asyncrl extensions (engine.Extensions), absent from vLLM.
	OutputLogprobs        []float32 `json:"output_logprobs"`
	TokenWeightVersions   []int64   `json:"token_weight_versions"`
	SampleSupport         [][]int32 `json:"sample_support"`
	OutputSupportLogprobs []float32 `json:"output_support_logprobs"`
}

// Generate posts one completion request and decodes the answer:
//   - tokens from choices[0].token_ids (return_token_ids);
//   - logprobs from the engine's output_logprobs when present, otherwise
//     from logprobs.token_logprobs (requested with logprobs: 0);
//   - versions from the engine's token_weight_versions when present,
//     otherwise every token gets the router's X-Asyncrl-Weight-Version-Min
//     (the oldest version the replica served during the call: staleness
//     counts from the oldest); neither is an error;
//   - sample_support and output_support_logprobs when the engine sends them.
//
// Every per-token array must have one entry per token, and prompt_token_ids,
// when present, must equal the prompt sent (a truncated prompt would
// misalign the trajectory).
func (c *HTTPClient) Generate(ctx context.Context, req TurnRequest) (TurnOutput, error) {
	if c.Protocol == ProtocolSGLang {
		return c.generateSGLang(ctx, req)
	}
	cb := completionBody{Model: c.Model, Prompt: req.Tokens, MaxTokens: req.MaxTokens,
		Temperature: req.Temperature, TopP: req.TopP, TopK: req.TopK, Stop: c.Stop, StopTokenIDs: c.StopTokenIDs,
		Logprobs: max(c.SupportFromLogprobs, 0), ReturnTokenIDs: true, ReturnTokensAsTokenIDs: true}
	if req.Routes.On() {
		cb.ReturnRoutedExperts, cb.RoutedExpertsPromptStart = true, req.RoutesStart
	}
	body, err := json.Marshal(cb)
	if err != nil {
		return TurnOutput{}, err
	}
	data, resp, err := c.post(ctx, "/v1/completions", body, req.SessionID)
	if err != nil {
		return TurnOutput{}, err
	}
	out, err := decodeAnswer(data, resp.Header, req.Tokens)
	if err == nil {
		err = c.replayFields(&out, req)
	}
	if err != nil {
		return TurnOutput{}, fmt.Errorf("%w: %s: %w", ErrEngine, resp.Request.URL, err)
	}
	out.Engine = resp.Header.Get("X-Asyncrl-Replica")
	return out, nil
}

// post sends a JSON body to path behind the router, with the session
// header the router keeps sessions on one replica by, and returns a 200
// answer's body (at most 16 MiB) and the response (its headers carry the
// router's versions and replica); a transport error or another status is
// an ErrEngine error.
func (c *HTTPClient) post(ctx context.Context, path string, body []byte, sessionID string) ([]byte, *http.Response, error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(c.BaseURL, "/")+path, bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("X-Session-ID", sessionID)
	resp, err := c.client().Do(hreq)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrEngine, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: read body: %w", ErrEngine, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("%w: HTTP %d: %s", ErrEngine, resp.StatusCode, bytes.TrimSpace(data))
	}
	return data, resp, nil
}

// decodeAnswer turns a /v1/completions body (and the router's headers)
// into a TurnOutput; prompt is the token ids sent.
func decodeAnswer(data []byte, h http.Header, prompt []int32) (TurnOutput, error) {
	var cr completionAnswer
	if err := json.Unmarshal(data, &cr); err != nil {
		return TurnOutput{}, fmt.Errorf("decode response: %w", err)
	}
	if len(cr.Choices) != 1 {
		return TurnOutput{}, fmt.Errorf("%d choices, want 1", len(cr.Choices))
	}
	ch := cr.Choices[0]
	out := TurnOutput{Tokens: ch.TokenIDs, Support: ch.SampleSupport, SupportLogprobs: ch.OutputSupportLogprobs}
	if ch.FinishReason != nil {
		out.Finish = *ch.FinishReason
	}
	if ch.TokenIDs == nil && (cr.Usage == nil || cr.Usage.CompletionTokens > 0) {
		return TurnOutput{}, errors.New("no choices[0].token_ids in the answer (vLLM needs return_token_ids, vLLM ≥ 0.10.2)")
	}
	n := len(out.Tokens)
	if ch.PromptTokenIDs != nil && !slices.Equal(ch.PromptTokenIDs, prompt) {
		return TurnOutput{}, fmt.Errorf("choices[0].prompt_token_ids (%d tokens) differ from the %d prompt tokens sent", len(ch.PromptTokenIDs), len(prompt))
	}

	var err error
	if out.Logprobs, err = answerLogprobs(ch, n); err != nil {
		return TurnOutput{}, err
	}
	if out.Versions, err = answerVersions(ch, h, n); err != nil {
		return TurnOutput{}, err
	}
	if err := checkLengths(out, n); err != nil {
		return TurnOutput{}, err
	}
	if out.Logprobs == nil {
		out.Logprobs = []float32{}
	}
	if out.Versions == nil {
		out.Versions = []int64{}
	}
	out.wireRoutes = ch.RoutedExperts
	if ch.Logprobs != nil {
		out.topLogprobs = ch.Logprobs.TopLogprobs
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

// answerLogprobs are the n generated tokens' logprobs: the engine's
// output_logprobs, else vLLM's logprobs.token_logprobs; nil for none.
func answerLogprobs(ch completionChoice, n int) ([]float32, error) {
	switch {
	case ch.OutputLogprobs != nil:
		return ch.OutputLogprobs, nil
	case ch.Logprobs != nil && ch.Logprobs.TokenLogprobs != nil:
		out := make([]float32, len(ch.Logprobs.TokenLogprobs))
		for i, lp := range ch.Logprobs.TokenLogprobs {
			if lp == nil {
				return nil, fmt.Errorf("choices[0].logprobs.token_logprobs[%d] is null for generated token %d", i, i)
			}
			out[i] = float32(*lp)
		}
		return out, nil
	case n > 0:
		return nil, fmt.Errorf("no logprobs for %d tokens: neither choices[0].output_logprobs nor choices[0].logprobs.token_logprobs", n)
	}
	return nil, nil
}

// answerVersions are the n generated tokens' weight versions: the
// engine's token_weight_versions, else the router's minimum-version
// header for every token; nil for none.
func answerVersions(ch completionChoice, h http.Header, n int) ([]int64, error) {
	switch {
	case ch.TokenWeightVersions != nil:
		return ch.TokenWeightVersions, nil
	case h.Get(versionMinHeader) != "":
		v, err := strconv.ParseInt(h.Get(versionMinHeader), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("header %s: %w", versionMinHeader, err)
		}
		out := make([]int64, n)
		for i := range out {
			out[i] = v
		}
		return out, nil
	case n > 0:
		return nil, fmt.Errorf("no weight versions for %d tokens: neither choices[0].token_weight_versions nor a %s header (call the engine through the router)", n, versionMinHeader)
	}
	return nil, nil
}

// checkLengths: every per-token array present has one entry per token.
func checkLengths(out TurnOutput, n int) error {
	var bad []string
	check := func(name string, got int, present bool) {
		if present && got != n {
			bad = append(bad, fmt.Sprintf("%d %s", got, name))
		}
	}
	check("logprobs", len(out.Logprobs), out.Logprobs != nil)
	check("token_weight_versions", len(out.Versions), out.Versions != nil)
	check("sample_support rows", len(out.Support), out.Support != nil)
	check("output_support_logprobs", len(out.SupportLogprobs), out.SupportLogprobs != nil)
	if bad != nil {
		return fmt.Errorf("%d token_ids but %s", n, strings.Join(bad, ", "))
	}
	return nil
}
