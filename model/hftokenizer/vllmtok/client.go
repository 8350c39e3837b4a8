// Package vllmtok is an hftokenizer.Encoder over a vLLM server's tokenizer:
// POST /tokenize and POST /detokenize. Use it when the engine owns the
// tokenizer and asyncrl has no tokenizer.json (or as a cross-check of
// hftokenizer against the engine).
//
// Wire shapes, from vLLM's vllm/entrypoints/serve/tokenize/protocol.py
// (formerly vllm/entrypoints/openai/protocol.py), TokenizeCompletionRequest,
// TokenizeResponse, DetokenizeRequest and DetokenizeResponse:
//
//	POST /tokenize   {"model": str?, "prompt": str, "add_special_tokens": bool}
//	             →   {"count": int, "max_model_len": int, "tokens": [int], "token_strs": [str]?}
//	POST /detokenize {"model": str?, "tokens": [int]}
//	             →   {"prompt": str}
//
// Errors are vLLM's ErrorResponse {"error": {"message", "type", "code"}} (older
// releases: a flat {"message", …}); the client puts the message in its error.
//
// add_special_tokens defaults to true in vLLM (a Llama-3 BOS is prepended);
// the client always sends Client.AddSpecialTokens, false unless set, so that
// it agrees with hftokenizer.Tokenizer.Encode, which adds nothing.
package vllmtok

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"

	"github.com/asyncrl/asyncrl/model/hftokenizer"
)

// maxBody bounds how much of a response the client reads.
const maxBody = 64 << 20

// Client calls one vLLM server's tokenizer routes. The zero HTTP uses
// http.DefaultClient; set a timeout through the ctx or HTTP.
type Client struct {
	// BaseURL is the server root, e.g. "http://10.0.0.5:8000" (no /v1).
	BaseURL string
	// Model is sent as "model"; empty leaves it out (vLLM then uses its served model).
	Model string
	// AddSpecialTokens is sent as "add_special_tokens" on /tokenize.
	AddSpecialTokens bool
	// HTTP is the client to use; nil means http.DefaultClient.
	HTTP *http.Client
}

var _ hftokenizer.Encoder = (*Client)(nil)

// New returns a Client for baseURL and model.
func New(baseURL, model string) *Client {
	return &Client{BaseURL: strings.TrimRight(baseURL, "/"), Model: model}
}

type tokenizeRequest struct {
	Model            string `json:"model,omitempty"`
	Prompt           string `json:"prompt"`
	AddSpecialTokens bool   `json:"add_special_tokens"`
}

type tokenizeResponse struct {
	Count       int     `json:"count"`
	MaxModelLen int     `json:"max_model_len"`
	Tokens      []int64 `json:"tokens"`
}

type detokenizeRequest struct {
	Model  string  `json:"model,omitempty"`
	Tokens []int32 `json:"tokens"`
}

type detokenizeResponse struct {
	Prompt *string `json:"prompt"`
}

// Encode tokenizes text on the server.
func (c *Client) Encode(ctx context.Context, text string) ([]int32, error) {
	var resp tokenizeResponse
	if err := c.post(ctx, "/tokenize", tokenizeRequest{Model: c.Model, Prompt: text, AddSpecialTokens: c.AddSpecialTokens}, &resp); err != nil {
		return nil, err
	}
	if resp.Tokens == nil {
		return nil, fmt.Errorf("vllmtok: %s/tokenize: response has no \"tokens\"", c.BaseURL)
	}
	ids := make([]int32, len(resp.Tokens))
	for i, v := range resp.Tokens {
		if v < 0 || v > math.MaxInt32 {
			return nil, fmt.Errorf("vllmtok: %s/tokenize: tokens[%d] = %d is not a valid int32 id", c.BaseURL, i, v)
		}
		ids[i] = int32(v)
	}
	return ids, nil
}

// Decode detokenizes ids on the server.
func (c *Client) Decode(ctx context.Context, ids []int32) (string, error) {
	if ids == nil {
		ids = []int32{} // "tokens" is required: send [], not null
	}
	var resp detokenizeResponse
	if err := c.post(ctx, "/detokenize", detokenizeRequest{Model: c.Model, Tokens: ids}, &resp); err != nil {
		return "", err
	}
	if resp.Prompt == nil {
		return "", fmt.Errorf("vllmtok: %s/detokenize: response has no \"prompt\"", c.BaseURL)
	}
	return *resp.Prompt, nil
}

func (c *Client) post(ctx context.Context, route string, body, out any) error {
	url := strings.TrimRight(c.BaseURL, "/") + route
	data, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("vllmtok: %s: encode request: %w", url, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("vllmtok: %s: %w", url, err)
	}
	req.Header.Set("Content-Type", "application/json")
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("vllmtok: POST %s: %w", url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return fmt.Errorf("vllmtok: POST %s: read response: %w", url, err)
	}
	if len(raw) > maxBody {
		return fmt.Errorf("vllmtok: POST %s: response larger than %d bytes", url, maxBody)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("vllmtok: POST %s: %s: %s", url, resp.Status, errorMessage(raw))
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("vllmtok: POST %s: decode response: %w", url, err)
	}
	return nil
}

// errorMessage pulls the message out of vLLM's ErrorResponse (nested or
// flat), else returns the start of the body.
func errorMessage(raw []byte) string {
	var e struct {
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
		Message string `json:"message"`
	}
	if json.Unmarshal(raw, &e) == nil {
		if e.Error != nil && e.Error.Message != "" {
			return e.Error.Message
		}
		if e.Message != "" {
			return e.Message
		}
	}
	s := strings.TrimSpace(string(raw))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	if s == "" {
		return "empty body"
	}
	return s
}
