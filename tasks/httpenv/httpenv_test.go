package httpenv

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/asyncrl/asyncrl/tasks"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newServer(t *testing.T, name string, cfg ServerConfig) (*Server, *httptest.Server, *Client) {
	t.Helper()
	task, err := tasks.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(task, cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	c, err := Dial(context.Background(), hs.URL, DefaultClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.hc.CloseIdleConnections)
	return srv, hs, c
}

type stepResult struct {
	obs    string
	reward float64
	done   bool
}

// run plays one episode with actions drawn from a rng seeded by seed, and
// records every step.
func run(t *testing.T, task tasks.Task, env tasks.Env, p tasks.Prompt, seed uint64) (string, []stepResult) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 9))
	first, err := env.Reset(p)
	if err != nil {
		t.Fatal(err)
	}
	var out []stepResult
	for range task.MaxTurns() {
		obs, r, done, err := env.Step(tasks.RandomAction(rng, task.MaxTokensPerTurn()))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, stepResult{obs, r, done})
		if done {
			break
		}
	}
	return first, out
}

// TestRoundTripMatchesLocal: every step over HTTP equals the local env's,
// for every built-in task, with and without prompt text.
func TestRoundTripMatchesLocal(t *testing.T) {
	for _, name := range []string{"arith", "copy", "gridwalk", "guess", "reverse", "sort"} {
		srv, _, c := newServer(t, name, DefaultServerConfig())
		local, _ := tasks.Get(name)
		if c.Name() != name || c.MaxTurns() != local.MaxTurns() || c.MaxTokensPerTurn() != local.MaxTokensPerTurn() {
			t.Fatalf("info %+v does not match %s", c.info, name)
		}
		rng := rand.New(rand.NewPCG(3, 3))
		for i := range 40 {
			p := local.Sample(rng)
			if i%2 == 1 {
				p = c.Sample(rng) // seed only: the server generates the text
			}
			lobs, lsteps := run(t, local, local.NewEnv(), p, uint64(i))
			robs, rsteps := run(t, c, c.NewEnv(), p, uint64(i))
			if lobs != robs || len(lsteps) != len(rsteps) {
				t.Fatalf("%s %+v: local %q %v, remote %q %v", name, p, lobs, lsteps, robs, rsteps)
			}
			for j := range lsteps {
				if lsteps[j] != rsteps[j] {
					t.Fatalf("%s %+v step %d: local %+v, remote %+v", name, p, j, lsteps[j], rsteps[j])
				}
			}
		}
		if n := srv.Episodes(); n != 0 {
			t.Errorf("%s: %d episodes left on the server after all were done", name, n)
		}
	}
}

func TestBadEpisodeID(t *testing.T) {
	_, _, c := newServer(t, "guess", DefaultServerConfig())
	env := c.NewRemoteEnv()
	if _, err := env.Reset(tasks.Prompt{Seed: 1}); err != nil {
		t.Fatal(err)
	}
	env.id = "no-such-episode"
	_, _, _, err := env.Step("5")
	var se *StatusError
	if !errors.Is(err, ErrUnknownEpisode) || !errors.As(err, &se) || se.Status != http.StatusNotFound ||
		!strings.Contains(err.Error(), `unknown episode_id "no-such-episode"`) {
		t.Fatalf("err = %v, want 404 ErrUnknownEpisode naming the id", err)
	}
	// A finished episode's id is gone too.
	single, _, sc := newServer(t, "arith", DefaultServerConfig())
	e2 := sc.NewRemoteEnv()
	e2.Reset(tasks.Prompt{Text: "1+1="})
	id := e2.EpisodeID()
	if _, _, done, err := e2.Step("2"); !done || err != nil {
		t.Fatal(done, err)
	}
	if _, _, _, err := e2.Step("2"); !errors.Is(err, tasks.ErrEpisodeDone) {
		t.Errorf("step after done: err = %v, want tasks.ErrEpisodeDone", err)
	}
	e2.id, e2.done = id, false
	if _, _, _, err := e2.Step("2"); !errors.Is(err, ErrUnknownEpisode) {
		t.Errorf("reused finished id: err = %v, want ErrUnknownEpisode", err)
	}
	if single.Episodes() != 0 {
		t.Errorf("episodes = %d", single.Episodes())
	}
	if _, _, _, err := sc.NewEnv().Step("2"); !errors.Is(err, tasks.ErrNotReset) {
		t.Errorf("step before reset: err = %v", err)
	}
}

func TestBadPromptOverHTTP(t *testing.T) {
	_, _, c := newServer(t, "reverse", DefaultServerConfig())
	_, err := c.NewEnv().Reset(tasks.Prompt{Text: "rev xyz="})
	var se *StatusError
	if !errors.Is(err, tasks.ErrBadPrompt) || !errors.As(err, &se) || se.Status != 400 || se.Code != CodeBadPrompt || !strings.Contains(err.Error(), "rev xyz=") {
		t.Fatalf("err = %v, want 400 bad_prompt matching tasks.ErrBadPrompt", err)
	}
}

func TestRawProtocolErrors(t *testing.T) {
	cfg := DefaultServerConfig()
	cfg.MaxBodyBytes = 256
	_, hs, _ := newServer(t, "reverse", cfg)
	cases := []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"POST", PathStep, `{"episode_id":`, 400, CodeBadRequest},
		{"POST", PathStep, `{"episode":"x","action":"a"}`, 400, CodeBadRequest}, // unknown field
		{"POST", PathStep, `{"action":"a"}`, 400, CodeBadRequest},               // missing id
		{"POST", PathStep, `{"episode_id":"x","action":"a"}`, 404, CodeUnknownEpisode},
		{"POST", PathClose, `{"episode_id":"x"}`, 404, CodeUnknownEpisode},
		{"POST", PathReset, `{"prompt":{"text":"bad"}}`, 400, CodeBadPrompt},
		{"POST", PathReset, `{"prompt":{"text":"` + strings.Repeat("a", 300) + `"}}`, 413, CodeTooLarge},
		{"GET", PathStep, ``, 405, CodeMethod},
		{"POST", PathInfo, `{}`, 405, CodeMethod},
		{"GET", "/nope", ``, 404, CodeNotFound},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(c.method, hs.URL+c.path, strings.NewReader(c.body))
		resp, err := hs.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || !strings.Contains(string(body), `"code":"`+c.code+`"`) ||
			resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s %s: %d %s, want %d %s", c.method, c.path, c.body, resp.StatusCode, body, c.status, c.code)
		}
	}
}

func TestCloseAndCapacity(t *testing.T) {
	cfg := DefaultServerConfig()
	cfg.MaxEpisodes = 2
	cfg.EpisodeTTL = time.Minute
	srv, _, c := newServer(t, "guess", cfg)
	now := time.Unix(1000, 0)
	srv.now = func() time.Time { return now }

	a, b, x := c.NewRemoteEnv(), c.NewRemoteEnv(), c.NewRemoteEnv()
	for _, e := range []*RemoteEnv{a, b} {
		if _, err := e.Reset(tasks.Prompt{Seed: 1}); err != nil {
			t.Fatal(err)
		}
	}
	var se *StatusError
	if _, err := x.Reset(tasks.Prompt{Seed: 1}); !errors.As(err, &se) || se.Status != 503 || se.Code != CodeTooManyEpisodes {
		t.Fatalf("third reset: err = %v, want 503", err)
	}
	if err := a.Close(context.Background()); err != nil || srv.Episodes() != 1 {
		t.Fatalf("close: %v, episodes %d", err, srv.Episodes())
	}
	if _, err := x.Reset(tasks.Prompt{Seed: 1}); err != nil {
		t.Fatalf("reset after close: %v", err)
	}
	// b stays in use, x goes idle past the TTL: x is swept when full.
	now = now.Add(40 * time.Second)
	if _, _, _, err := b.Step("1"); err != nil {
		t.Fatal(err)
	}
	now = now.Add(40 * time.Second)
	if _, err := a.Reset(tasks.Prompt{Seed: 2}); err != nil {
		t.Fatalf("reset when full with an expired episode: %v", err)
	}
	if _, _, _, err := x.Step("1"); !errors.Is(err, ErrUnknownEpisode) {
		t.Errorf("expired episode: err = %v, want ErrUnknownEpisode", err)
	}
	if _, _, _, err := b.Step("2"); err != nil {
		t.Errorf("live episode: %v", err)
	}
}

func TestListenServeLoopback(t *testing.T) {
	ln, err := Listen("")
	if err != nil {
		t.Fatal(err)
	}
	if ip := ln.Addr().(*net.TCPAddr).IP; !ip.Equal(net.IPv4(127, 0, 0, 1)) {
		t.Fatalf("bound to %v, want 127.0.0.1", ip)
	}
	task, _ := tasks.Get("arith")
	srv, _ := NewServer(task, DefaultServerConfig())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, srv) }()
	c, err := Dial(context.Background(), "http://"+ln.Addr().String()+"/", DefaultClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	env := c.NewEnv()
	if obs, err := env.Reset(tasks.Prompt{Text: "4+4="}); err != nil || obs != "4+4=" {
		t.Fatalf("reset: %q %v", obs, err)
	}
	if _, r, done, err := env.Step("8"); err != nil || r != 1 || !done {
		t.Fatalf("step: %v %v %v", r, done, err)
	}
	c.hc.CloseIdleConnections()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

func TestClientTimeout(t *testing.T) {
	release := make(chan struct{})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == PathInfo {
			io.WriteString(w, `{"name":"slow","max_turns":1,"max_tokens_per_turn":1}`)
			return
		}
		select { // hang until the client gives up
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer hs.Close()
	defer close(release)
	cfg := DefaultClientConfig()
	cfg.Timeout = 50 * time.Millisecond
	c, err := Dial(context.Background(), hs.URL, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.hc.CloseIdleConnections()
	if _, err := c.NewEnv().Reset(tasks.Prompt{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Reset: err = %v, want DeadlineExceeded", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.NewRemoteEnv().ResetContext(ctx, tasks.Prompt{}); !errors.Is(err, context.Canceled) {
		t.Errorf("ResetContext: err = %v, want Canceled", err)
	}
}

func TestDialErrors(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:1", "ftp://x"} {
		if _, err := Dial(context.Background(), u, DefaultClientConfig()); err == nil || !strings.Contains(err.Error(), "base URL") {
			t.Errorf("Dial(%q): err = %v", u, err)
		}
	}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"name":""}`)
	}))
	defer hs.Close()
	c := DefaultClientConfig()
	c.HTTPClient = hs.Client()
	if _, err := Dial(context.Background(), hs.URL, c); !errors.Is(err, ErrProtocol) {
		t.Errorf("bad info: err = %v, want ErrProtocol", err)
	}
	hs.Client().CloseIdleConnections()
	if _, err := NewServer(nil, DefaultServerConfig()); err == nil {
		t.Error("NewServer(nil) succeeded")
	}
	bad := DefaultServerConfig()
	bad.MaxEpisodes = 0
	task, _ := tasks.Get("arith")
	if _, err := NewServer(task, bad); err == nil || !strings.Contains(err.Error(), "MaxEpisodes") {
		t.Errorf("bad config: err = %v", err)
	}
}
