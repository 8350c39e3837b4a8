package driver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// base is the HTTP plumbing and swap record every driver shares.
type base struct {
	kind   Kind
	url    string
	client *http.Client
	opts   Options
	hints  func(route string, status int, msg string) string

	mu    sync.Mutex
	model string // resolved served model name
	swaps []Swap
}

func newBase(kind Kind, rawURL string, opts Options, hints func(string, int, string) string) (*base, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("engine driver: %s engine URL %q must be http(s)://host:port", kind, rawURL)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 60 * time.Second
	}
	if opts.LoadTimeout <= 0 {
		opts.LoadTimeout = 10 * time.Minute
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	c := opts.Client
	if c == nil {
		c = &http.Client{}
	}
	return &base{
		kind: kind, url: strings.TrimRight(rawURL, "/"), client: c, opts: opts,
		hints: hints, model: opts.Model,
	}, nil
}

func (b *base) Kind() Kind  { return b.kind }
func (b *base) URL() string { return b.url }

// do sends one request and returns the status and body of a 2xx answer;
// anything else is a *RouteError. body nil sends no body; a non-nil body is
// JSON-encoded. long selects LoadTimeout over Timeout.
func (b *base) do(ctx context.Context, method, path string, query url.Values, body any, long bool) ([]byte, error) {
	route := method + " " + path
	timeout := b.opts.Timeout
	if long {
		timeout = b.opts.LoadTimeout
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	target := b.url + path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	var rd io.Reader
	if body != nil {
		buf, err := json.Marshal(body)
		if err != nil {
			return nil, &RouteError{Engine: b.url, Route: route, Message: "encoding request: " + err.Error(), Err: err}
		}
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return nil, &RouteError{Engine: b.url, Route: route, Message: err.Error(), Err: err}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if b.opts.APIKey != "" {
		// vLLM's --api-key scheme (and the built-in engine's); SGLang's
		// --api-key reads the same header.
		req.Header.Set("Authorization", "Bearer "+b.opts.APIKey)
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return nil, &RouteError{Engine: b.url, Route: route, Message: err.Error(), Err: err,
			Hint: "is the engine running and reachable at this URL?"}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, &RouteError{Engine: b.url, Route: route, Status: resp.StatusCode, Message: "reading body: " + err.Error(), Err: err}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		msg := errorMessage(data)
		re := &RouteError{Engine: b.url, Route: route, Status: resp.StatusCode, Message: msg}
		if b.hints != nil {
			re.Hint = b.hints(path, resp.StatusCode, msg)
		}
		if resp.StatusCode == http.StatusUnauthorized && re.Hint == "" {
			re.Hint = "the engine wants an API key: set engines.external[].api_key_file (or --api-key-file), the key the engine was started with"
			if b.opts.APIKey != "" {
				re.Hint = "the engine refused this API key: check engines.external[].api_key_file against the engine's --api-key"
			}
		}
		return nil, re
	}
	return data, nil
}

// doJSON is do followed by decoding a JSON answer into out.
func (b *base) doJSON(ctx context.Context, method, path string, query url.Values, body, out any, long bool) error {
	data, err := b.do(ctx, method, path, query, body, long)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, out); err != nil {
		return &RouteError{Engine: b.url, Route: method + " " + path, Status: http.StatusOK,
			Message: fmt.Sprintf("unexpected response %.200q: %v", data, err), Err: err}
	}
	return nil
}

// shapeError reports a 2xx answer of the wrong shape.
func (b *base) shapeError(route, format string, args ...any) error {
	return &RouteError{Engine: b.url, Route: route, Status: http.StatusOK, Message: fmt.Sprintf(format, args...)}
}

// errorMessage extracts the message of an error body in any of the shapes
// vLLM and SGLang use: {"error":{"message"}}, {"error":"..."},
// {"message"}, {"detail"} (FastAPI), or the raw text.
func errorMessage(data []byte) string {
	var env struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(data, &env) == nil {
		if len(env.Error) > 0 {
			var s string
			if json.Unmarshal(env.Error, &s) == nil {
				return s
			}
			var d struct {
				Message string `json:"message"`
			}
			if json.Unmarshal(env.Error, &d) == nil && d.Message != "" {
				return d.Message
			}
		}
		if env.Message != "" {
			return env.Message
		}
		if len(env.Detail) > 0 {
			var s string
			if json.Unmarshal(env.Detail, &s) == nil {
				return s
			}
			return string(env.Detail)
		}
	}
	s := strings.TrimSpace(string(data))
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// servedModel returns Options.Model or the first name /v1/models lists.
func (b *base) servedModel(ctx context.Context) (string, error) {
	b.mu.Lock()
	m := b.model
	b.mu.Unlock()
	if m != "" {
		return m, nil
	}
	names, err := b.Models(ctx)
	if err != nil {
		return "", err
	}
	if len(names) == 0 {
		return "", b.shapeError("GET /v1/models", "no served models listed")
	}
	b.mu.Lock()
	b.model = names[0]
	b.mu.Unlock()
	return names[0], nil
}

// Models lists /v1/models' ids (both vLLM and SGLang serve it).
func (b *base) Models(ctx context.Context) ([]string, error) {
	var out struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := b.doJSON(ctx, http.MethodGet, "/v1/models", nil, nil, &out, false); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(out.Data))
	for _, d := range out.Data {
		names = append(names, d.ID)
	}
	return names, nil
}

// Health answers nil on a 2xx GET /health.
// metrics reads GET /metrics and maps the metric names of the driver's
// kind (ParseMetrics' mapping: KV usage is the fullest series).
func (b *base) metrics(ctx context.Context, kind Kind) (Metrics, error) {
	data, err := b.do(ctx, http.MethodGet, "/metrics", nil, nil, false)
	if err != nil {
		return Metrics{}, err
	}
	s, err := parseSamples(data)
	if err != nil {
		return Metrics{}, b.shapeError("GET /metrics", "%v", err)
	}
	return metricsFrom(kind, s), nil
}

func (b *base) Health(ctx context.Context) error {
	_, err := b.do(ctx, http.MethodGet, "/health", nil, nil, false)
	return err
}

// SwapsKept bounds a driver's swap record: the newest SwapsKept swaps
// (by start) are kept. A run of days swaps weights every step, and a
// record of every swap grew by one entry per step for ever (issue 37);
// a request that outlives SwapsKept swaps is bounded from the oldest one
// kept (VersionsDuring).
const SwapsKept = 64

// recordSwap inserts a completed swap into the record, in start order
// (swaps may complete out of order), dropping the oldest past SwapsKept.
func (b *base) recordSwap(version int64, start, end time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := sort.Search(len(b.swaps), func(i int) bool { return b.swaps[i].Start.After(start) })
	b.swaps = slices.Insert(b.swaps, i, Swap{Version: version, Start: start, End: end})
	if over := len(b.swaps) - SwapsKept; over > 0 {
		b.swaps = append(b.swaps[:0], b.swaps[over:]...)
	}
}

// lastVersion is the newest recorded version, -1 when none.
func (b *base) lastVersion() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.swaps) == 0 {
		return -1
	}
	return b.swaps[len(b.swaps)-1].Version
}

func (b *base) Swaps() []Swap {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Swap(nil), b.swaps...)
}

func (b *base) VersionsDuring(start, end time.Time) (oldest, newest int64) {
	return versionsDuring(b.Swaps(), start, end)
}

// versionsDuring bounds the versions served in [start, end] given swaps
// sorted by Start: a swap is certainly in effect after its End and possibly
// from its Start. oldest = the version of the last swap that ended at or
// before start (or, if none ended by then, the first swap's version when it
// began before end); newest = the version of the last swap that began
// before or at end. -1, -1 when no swap began by end.
func versionsDuring(swaps []Swap, start, end time.Time) (oldest, newest int64) {
	oldest, newest = -1, -1
	for _, s := range swaps {
		if s.Start.After(end) {
			break
		}
		newest = s.Version
		if !s.End.After(start) {
			oldest = s.Version
		}
	}
	if oldest == -1 && newest != -1 {
		// No swap had completed by start: the first one recorded is the
		// oldest the driver knows of.
		oldest = swaps[0].Version
	}
	return oldest, newest
}

// Capabilities is the default for a driver that does not read its
// engine's release: unknown, every feature assumed.
func (b *base) Capabilities(ctx context.Context) (Capabilities, error) {
	return UnknownCapabilities(b.kind), nil
}
