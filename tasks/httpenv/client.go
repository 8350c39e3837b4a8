package httpenv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/asyncrl/asyncrl/tasks"
)

// Client errors. A *StatusError also matches the tasks sentinel that its
// code stands for (tasks.ErrBadPrompt for bad_prompt), so callers handle a
// remote task like a local one.
var (
	// ErrUnknownEpisode: the server does not know the episode (404).
	ErrUnknownEpisode = errors.New("httpenv: unknown episode")
	// ErrProtocol: the server answered something that is not this protocol.
	ErrProtocol = errors.New("httpenv: protocol error")
)

// StatusError is a non-2xx answer from the server.
type StatusError struct {
	Method, URL string
	Status      int
	Code        string // ErrorResponse.Code
	Message     string // ErrorResponse.Error
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("httpenv: %s %s: %d %s: %s", e.Method, e.URL, e.Status, e.Code, e.Message)
}

// Is maps the wire code to the matching sentinel.
func (e *StatusError) Is(target error) bool {
	switch e.Code {
	case CodeUnknownEpisode:
		return target == ErrUnknownEpisode
	case CodeBadPrompt:
		return target == tasks.ErrBadPrompt
	}
	return false
}

// ClientConfig configures a Client.
type ClientConfig struct {
	// Timeout bounds each request made through Reset and Step (which take no
	// context). ResetContext/StepContext use the caller's context instead.
	Timeout time.Duration
	// HTTPClient makes the requests; nil means a client with its own
	// connection pool and no overall timeout (Timeout applies per request).
	HTTPClient *http.Client
	// MaxResponseBytes bounds a response body.
	MaxResponseBytes int64
}

// DefaultClientConfig: 30 s per request, 1 MiB responses.
func DefaultClientConfig() ClientConfig {
	return ClientConfig{Timeout: 30 * time.Second, MaxResponseBytes: 1 << 20}
}

// Client is a tasks.Task backed by a server speaking this protocol.
type Client struct {
	base string
	cfg  ClientConfig
	hc   *http.Client
	info Info
}

var _ tasks.Task = (*Client)(nil)

// Dial reads GET /info from the server at baseURL (e.g.
// "http://127.0.0.1:8321") and returns a Task for it.
func Dial(ctx context.Context, baseURL string, cfg ClientConfig) (*Client, error) {
	if cfg.Timeout <= 0 {
		return nil, fmt.Errorf("httpenv: ClientConfig.Timeout %v: want > 0", cfg.Timeout)
	}
	if cfg.MaxResponseBytes <= 0 {
		return nil, fmt.Errorf("httpenv: ClientConfig.MaxResponseBytes %d: want > 0", cfg.MaxResponseBytes)
	}
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("httpenv: base URL %q: want http(s)://host[:port][/prefix]", baseURL)
	}
	c := &Client{base: strings.TrimSuffix(baseURL, "/"), cfg: cfg, hc: cfg.HTTPClient}
	if c.hc == nil {
		c.hc = &http.Client{}
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	if err := c.do(ctx, http.MethodGet, PathInfo, nil, &c.info); err != nil {
		return nil, err
	}
	if !c.info.Valid() {
		return nil, fmt.Errorf("%w: %s%s returned %+v: want a name and positive limits", ErrProtocol, c.base, PathInfo, c.info)
	}
	return c, nil
}

// Name, MaxTurns and MaxTokensPerTurn are the server's, read once by Dial.
func (c *Client) Name() string          { return c.info.Name }
func (c *Client) MaxTurns() int         { return c.info.MaxTurns }
func (c *Client) MaxTokensPerTurn() int { return c.info.MaxTokensPerTurn }

// Sample draws a seed only: the prompt's Text is empty and the server
// generates it from the seed on Reset (the observation carries it). That
// keeps Sample free of I/O, as the Task contract asks.
func (c *Client) Sample(rng *rand.Rand) tasks.Prompt { return c.info.SeedPrompt(rng) }

// NewEnv returns an Env whose episodes live on the server.
func (c *Client) NewEnv() tasks.Env { return c.NewRemoteEnv() }

// NewRemoteEnv is NewEnv with the concrete type (for the Context methods).
func (c *Client) NewRemoteEnv() *RemoteEnv { return &RemoteEnv{c: c} }

// RemoteEnv is one episode on the server. Like every Env it is not safe for
// concurrent use.
type RemoteEnv struct {
	c    *Client
	id   string
	done bool
}

var _ tasks.Env = (*RemoteEnv)(nil)

// EpisodeID is the server's id of the current episode ("" before Reset).
func (e *RemoteEnv) EpisodeID() string { return e.id }

// Reset is ResetContext with ClientConfig.Timeout.
func (e *RemoteEnv) Reset(p tasks.Prompt) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), e.c.cfg.Timeout)
	defer cancel()
	return e.ResetContext(ctx, p)
}

// ResetContext starts an episode on the server. A previous unfinished
// episode of this env is left to the server's TTL; call Close to free it now.
func (e *RemoteEnv) ResetContext(ctx context.Context, p tasks.Prompt) (string, error) {
	e.id, e.done = "", false
	var resp ResetResponse
	if err := e.c.do(ctx, http.MethodPost, PathReset, ResetRequest{Prompt: p}, &resp); err != nil {
		return "", err
	}
	if resp.EpisodeID == "" {
		return "", fmt.Errorf("%w: %s%s returned no episode_id", ErrProtocol, e.c.base, PathReset)
	}
	e.id = resp.EpisodeID
	return resp.Observation, nil
}

// Step is StepContext with ClientConfig.Timeout.
func (e *RemoteEnv) Step(action string) (string, float64, bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), e.c.cfg.Timeout)
	defer cancel()
	return e.StepContext(ctx, action)
}

// StepContext sends one action. Step before Reset and Step after done fail
// locally with tasks.ErrNotReset / tasks.ErrEpisodeDone, as a local Env would.
func (e *RemoteEnv) StepContext(ctx context.Context, action string) (string, float64, bool, error) {
	if e.id == "" {
		return "", 0, false, tasks.ErrNotReset
	}
	if e.done {
		return "", 0, true, tasks.ErrEpisodeDone
	}
	var resp StepResponse
	if err := e.c.do(ctx, http.MethodPost, PathStep, StepRequest{EpisodeID: e.id, Action: action}, &resp); err != nil {
		return "", 0, false, err
	}
	e.done = resp.Done
	return resp.Observation, resp.Reward, resp.Done, nil
}

// Close abandons an unfinished episode on the server; it is a no-op before
// Reset or after done.
func (e *RemoteEnv) Close(ctx context.Context) error {
	if e.id == "" || e.done {
		return nil
	}
	err := e.c.do(ctx, http.MethodPost, PathClose, CloseRequest{EpisodeID: e.id}, nil)
	e.done = true
	return err
}

// do sends one request; in is JSON-encoded when non-nil, out decoded when
// non-nil.
func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("httpenv: encode %s: %w", path, err)
		}
		body = bytes.NewReader(b)
	}
	u := c.base + path
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return fmt.Errorf("httpenv: %s %s: %w", method, u, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("httpenv: %s %s: %w", method, u, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, c.cfg.MaxResponseBytes+1))
	if err != nil {
		return fmt.Errorf("httpenv: %s %s: read body: %w", method, u, err)
	}
	if int64(len(data)) > c.cfg.MaxResponseBytes {
		return fmt.Errorf("%w: %s %s: response over %d bytes", ErrProtocol, method, u, c.cfg.MaxResponseBytes)
	}
	if resp.StatusCode/100 != 2 {
		var er ErrorResponse
		if json.Unmarshal(data, &er) != nil || er.Error == "" {
			er = ErrorResponse{Error: strings.TrimSpace(string(data)), Code: fmt.Sprintf("http_%d", resp.StatusCode)}
		}
		return &StatusError{Method: method, URL: u, Status: resp.StatusCode, Code: er.Code, Message: er.Error}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%w: %s %s: %w", ErrProtocol, method, u, err)
	}
	return nil
}
