// Package client is a Go client of the Tinker API as asyncrl's server (and
// the tinker SDK ≤ 0.24.1) speaks it: JSON bodies under /api/v1/, futures
// polled with retrieve_future; wire.go adds what SDK 0.25 does in protobuf
// (forward_backward bodies, sample and forward_backward answers). The
// tests and the load benchmark use it; it calls every route the server has.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/asyncrl/asyncrl/tinker"
)

// Client talks to one server.
type Client struct {
	// BaseURL is the server root, e.g. http://127.0.0.1:8100.
	BaseURL string
	// APIKey is sent as X-API-Key when set.
	APIKey string
	// HTTP is the client used (default http.DefaultClient).
	HTTP *http.Client
}

// APIError is a non-200 answer.
type APIError struct {
	Code int
	Body string
}

func (e *APIError) Error() string { return fmt.Sprintf("tinker: HTTP %d: %s", e.Code, e.Body) }

// FutureError is a future that finished with a failure.
type FutureError struct{ tinker.RequestFailedResponse }

func (e *FutureError) Error() string {
	return fmt.Sprintf("tinker: request failed (%s): %s", e.Category, e.RequestFailedResponse.Error)
}

// Do sends in as JSON (nil: no body) and decodes a 200 answer into out.
func (c *Client) Do(ctx context.Context, method, path string, in, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return err
		}
	}
	a, err := c.send(ctx, method, path, body)
	if err != nil {
		return err
	}
	if a.Code != http.StatusOK {
		return &APIError{Code: a.Code, Body: string(a.Body)}
	}
	if out == nil {
		return nil
	}
	if raw, ok := out.(*json.RawMessage); ok {
		*raw = a.Body
		return nil
	}
	return json.Unmarshal(a.Body, out)
}

// Poll is one retrieve_future call: done false on try_again; a failed
// future is a *FutureError.
func (c *Client) Poll(ctx context.Context, id string) (result json.RawMessage, done bool, err error) {
	var raw json.RawMessage
	if err := c.Do(ctx, "POST", "retrieve_future", tinker.RetrieveFutureRequest{RequestID: id}, &raw); err != nil {
		return nil, false, err
	}
	var probe struct {
		Type     string  `json:"type"`
		Error    *string `json:"error"`
		Category string  `json:"category"`
	}
	_ = json.Unmarshal(raw, &probe)
	switch {
	case probe.Type == "try_again":
		return nil, false, nil
	case probe.Error != nil && probe.Category != "":
		return nil, true, &FutureError{tinker.RequestFailedResponse{Error: *probe.Error, Category: probe.Category}}
	}
	return raw, true, nil
}

// Wait polls id until it finishes and decodes its result into out.
func (c *Client) Wait(ctx context.Context, id string, out any) error {
	for {
		raw, done, err := c.Poll(ctx, id)
		if err != nil {
			return err
		}
		if done {
			if out == nil {
				return nil
			}
			return json.Unmarshal(raw, out)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// call submits a future route and waits for its result.
func (c *Client) call(ctx context.Context, path string, in, out any) error {
	var f tinker.UntypedAPIFuture
	if err := c.Do(ctx, "POST", path, in, &f); err != nil {
		return err
	}
	if f.RequestID == "" {
		return errors.New("tinker: " + path + " answered no request_id")
	}
	return c.Wait(ctx, f.RequestID, out)
}

// Submit sends a future route and returns its request id.
func (c *Client) Submit(ctx context.Context, path string, in any) (string, error) {
	var f tinker.UntypedAPIFuture
	if err := c.Do(ctx, "POST", path, in, &f); err != nil {
		return "", err
	}
	return f.RequestID, nil
}

// Healthz is GET healthz.
func (c *Client) Healthz(ctx context.Context) error { return c.Do(ctx, "GET", "healthz", nil, nil) }

// Capabilities is GET get_server_capabilities.
func (c *Client) Capabilities(ctx context.Context) ([]string, error) {
	var out struct {
		SupportedModels []struct {
			ModelName string `json:"model_name"`
		} `json:"supported_models"`
	}
	if err := c.Do(ctx, "GET", "get_server_capabilities", nil, &out); err != nil {
		return nil, err
	}
	var names []string
	for _, m := range out.SupportedModels {
		names = append(names, m.ModelName)
	}
	return names, nil
}

// ClientConfig is POST client/config; Telemetry is POST telemetry.
func (c *Client) ClientConfig(ctx context.Context) (map[string]any, error) {
	var out map[string]any
	err := c.Do(ctx, "POST", "client/config", map[string]string{"sdk_version": "asyncrl-go"}, &out)
	return out, err
}

// Telemetry posts an empty telemetry batch.
func (c *Client) Telemetry(ctx context.Context) error {
	return c.Do(ctx, "POST", "telemetry", map[string]any{"events": []any{}}, nil)
}

// CreateSession opens a session.
func (c *Client) CreateSession(ctx context.Context) (string, error) {
	var out tinker.CreateSessionResponse
	err := c.Do(ctx, "POST", "create_session", tinker.CreateSessionRequest{Tags: []string{}, UserMetadata: map[string]any{}, SDKVersion: "asyncrl-go"}, &out)
	return out.SessionID, err
}

// Heartbeat keeps a session alive.
func (c *Client) Heartbeat(ctx context.Context, session string) error {
	return c.Do(ctx, "POST", "session_heartbeat", tinker.SessionRequest{SessionID: session}, nil)
}

// CreateModel creates a LoRA model of rank on base and waits for its id.
func (c *Client) CreateModel(ctx context.Context, session, base string, seq int64, rank int) (string, error) {
	var out struct {
		ModelID string `json:"model_id"`
	}
	err := c.call(ctx, "create_model", tinker.CreateModelRequest{SessionID: session, ModelSeqID: &seq, BaseModel: base,
		LoraConfig: &tinker.LoraConfig{Rank: rank}}, &out)
	return out.ModelID, err
}

// GetInfo is POST get_info.
func (c *Client) GetInfo(ctx context.Context, model string) (tinker.GetInfoResponse, error) {
	var out tinker.GetInfoResponse
	err := c.Do(ctx, "POST", "get_info", tinker.ModelRequest{ModelID: model}, &out)
	return out, err
}

// Forward runs the loss without a gradient.
func (c *Client) Forward(ctx context.Context, model string, seq int64, in tinker.ForwardBackwardInput) (tinker.ForwardBackwardOutput, error) {
	var out tinker.ForwardBackwardOutput
	err := c.call(ctx, "forward", tinker.ForwardRequest{ModelID: model, SeqID: &seq, ForwardInput: &in}, &out)
	return out, err
}

// ForwardBackward runs the loss and accumulates its gradient.
func (c *Client) ForwardBackward(ctx context.Context, model string, seq int64, in tinker.ForwardBackwardInput) (tinker.ForwardBackwardOutput, error) {
	var out tinker.ForwardBackwardOutput
	err := c.call(ctx, "forward_backward", tinker.ForwardBackwardRequest{ModelID: model, SeqID: &seq, ForwardBackwardInput: &in}, &out)
	return out, err
}

// OptimStep applies the accumulated gradient.
func (c *Client) OptimStep(ctx context.Context, model string, seq int64, p tinker.AdamParams) (tinker.OptimStepResponse, error) {
	var out tinker.OptimStepResponse
	err := c.call(ctx, "optim_step", tinker.OptimStepRequest{ModelID: model, SeqID: &seq, AdamParams: &p}, &out)
	return out, err
}

// SaveWeights saves training state under name; it returns the tinker:// path.
func (c *Client) SaveWeights(ctx context.Context, model string, seq int64, name string) (string, error) {
	var out struct {
		Path string `json:"path"`
	}
	err := c.call(ctx, "save_weights", tinker.SaveWeightsRequest{ModelID: model, SeqID: &seq, Path: name}, &out)
	return out.Path, err
}

// SaveForSampler saves serving weights: named (path returned) or, with
// name "", as a new sampling session (its id returned).
func (c *Client) SaveForSampler(ctx context.Context, model string, seq int64, name string, samplingSeq int64) (path, samplingSession string, err error) {
	req := tinker.SaveWeightsForSamplerRequest{ModelID: model, SeqID: &seq}
	if name != "" {
		req.Path = &name
	} else {
		req.SamplingSessionSeqID = &samplingSeq
	}
	var out struct {
		Path              string `json:"path"`
		SamplingSessionID string `json:"sampling_session_id"`
	}
	err = c.call(ctx, "save_weights_for_sampler", req, &out)
	return out.Path, out.SamplingSessionID, err
}

// LoadWeights loads a saved state into model.
func (c *Client) LoadWeights(ctx context.Context, model string, seq int64, path string, optimizer bool) error {
	return c.call(ctx, "load_weights", tinker.LoadWeightsRequest{ModelID: model, SeqID: &seq, Path: path, Optimizer: optimizer}, nil)
}

// UnloadModel unloads model.
func (c *Client) UnloadModel(ctx context.Context, model string) error {
	return c.call(ctx, "unload_model", tinker.ModelRequest{ModelID: model}, nil)
}

// CreateSamplingSession samples from modelPath ("" = the base model).
func (c *Client) CreateSamplingSession(ctx context.Context, session string, seq int64, base, modelPath string) (string, error) {
	req := tinker.CreateSamplingSessionRequest{SessionID: session, SamplingSessionSeqID: &seq}
	if modelPath != "" {
		req.ModelPath = &modelPath
	} else {
		req.BaseModel = &base
	}
	var out struct {
		ID string `json:"sampling_session_id"`
	}
	err := c.Do(ctx, "POST", "create_sampling_session", req, &out)
	return out.ID, err
}

// GetSampler is GET samplers/{id}.
func (c *Client) GetSampler(ctx context.Context, id string) (map[string]string, error) {
	var out map[string]string
	err := c.Do(ctx, "GET", "samplers/"+id, nil, &out)
	return out, err
}

// SampleRequest builds an asample body for a sampling session.
func SampleRequest(sampler string, seq int64, prompt []int32, n, maxTokens int, temperature float64) tinker.SampleRequest {
	return tinker.SampleRequest{SamplingSessionID: &sampler, SeqID: &seq, NumSamples: &n,
		Prompt:         &tinker.ModelInput{Chunks: []tinker.Chunk{{Type: "encoded_text", Tokens: prompt}}},
		SamplingParams: &tinker.SamplingParams{MaxTokens: &maxTokens, Temperature: &temperature}}
}

// ASample submits a sample request and returns its future id.
func (c *Client) ASample(ctx context.Context, req tinker.SampleRequest) (string, error) {
	return c.Submit(ctx, "asample", req)
}

// Sample submits and waits.
func (c *Client) Sample(ctx context.Context, req tinker.SampleRequest) (tinker.SampleResponse, error) {
	var out tinker.SampleResponse
	err := c.call(ctx, "asample", req, &out)
	return out, err
}
