package chatenv

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/asyncrl/asyncrl/tasks"
)

// ClientConfig configures a Client.
type ClientConfig struct {
	// Timeout bounds Dial's GET /info (each episode call is bounded by the
	// rollout's context: rollout.env.step_timeout).
	Timeout time.Duration
	// HTTPClient makes the requests (nil: a client of its own).
	HTTPClient *http.Client
	// MaxResponseBytes bounds an answer.
	MaxResponseBytes int64
}

// DefaultClientConfig: 30 s for /info, 4 MiB answers.
func DefaultClientConfig() ClientConfig {
	return ClientConfig{Timeout: 30 * time.Second, MaxResponseBytes: 4 << 20}
}

// Client is a Task whose episodes live on a server speaking this
// package's wire form (wire.go).
type Client struct {
	base string
	cfg  ClientConfig
	hc   *http.Client
	info Info
}

var _ Task = (*Client)(nil)

// Dial reads GET /info from baseURL and returns the server as a Task.
func Dial(ctx context.Context, baseURL string, cfg ClientConfig) (*Client, error) {
	if cfg.Timeout <= 0 || cfg.MaxResponseBytes <= 0 {
		return nil, fmt.Errorf("chatenv: ClientConfig %+v: Timeout and MaxResponseBytes must be > 0", cfg)
	}
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("chatenv: base URL %q: want http(s)://host[:port][/prefix]", baseURL)
	}
	c := &Client{base: strings.TrimSuffix(baseURL, "/"), cfg: cfg, hc: cfg.HTTPClient}
	if c.hc == nil {
		c.hc = &http.Client{}
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	if err := PostJSON(ctx, c.hc, http.MethodGet, c.base+PathInfo, cfg.MaxResponseBytes, nil, &c.info); err != nil {
		return nil, fmt.Errorf("chatenv: dial %s (is the environment server running?): %w", c.base, err)
	}
	if !c.info.Valid() {
		return nil, fmt.Errorf("%w: %s%s returned %+v: want a name and positive limits", ErrEnv, c.base, PathInfo, c.info)
	}
	return c, nil
}

// Name, MaxTurns and MaxTokensPerTurn are the server's /info.
func (c *Client) Name() string          { return c.info.Name }
func (c *Client) MaxTurns() int         { return c.info.MaxTurns }
func (c *Client) MaxTokensPerTurn() int { return c.info.MaxTokensPerTurn }

// Sample draws a seed only; the server makes the prompt on reset.
func (c *Client) Sample(rng *rand.Rand) tasks.Prompt { return c.info.SeedPrompt(rng) }

// NewEnv is the text-level view of an episode (TextEnv).
func (c *Client) NewEnv() tasks.Env { return TextEnv(c.NewChatEnv(), ToolsNone, c.cfg.Timeout) }

// NewChatEnv returns one episode on the server.
func (c *Client) NewChatEnv() Env { return &remoteEnv{c: c} }

type remoteEnv struct {
	c    *Client
	id   string
	done bool
}

func (e *remoteEnv) Reset(ctx context.Context, p tasks.Prompt) (Start, error) {
	var resp ResetResponse
	if err := PostJSON(ctx, e.c.hc, http.MethodPost, e.c.base+PathReset, e.c.cfg.MaxResponseBytes, ResetRequest{Prompt: p}, &resp); err != nil {
		return Start{}, err
	}
	if resp.EpisodeID == "" {
		return Start{}, fmt.Errorf("%w: %s%s returned no episode_id", ErrEnv, e.c.base, PathReset)
	}
	e.id, e.done = resp.EpisodeID, false
	return resp.Start, nil
}

func (e *remoteEnv) Step(ctx context.Context, a Action) (Result, error) {
	if e.id == "" {
		return Result{}, tasks.ErrNotReset
	}
	var res Result
	if err := PostJSON(ctx, e.c.hc, http.MethodPost, e.c.base+PathStep, e.c.cfg.MaxResponseBytes, StepRequest{EpisodeID: e.id, Action: a}, &res); err != nil {
		return Result{}, err
	}
	e.done = res.Done
	return res, nil
}

// Close frees an unfinished episode on the server.
func (e *remoteEnv) Close(ctx context.Context) error {
	if e.id == "" || e.done {
		return nil
	}
	e.done = true
	return PostJSON(ctx, e.c.hc, http.MethodPost, e.c.base+PathClose, e.c.cfg.MaxResponseBytes, CloseRequest{EpisodeID: e.id}, nil)
}
