package rollout

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/model/tokenizer"
	"github.com/asyncrl/asyncrl/tasks"
)

// scripted answers each Generate call with the next entry.
type scripted struct {
	mu       sync.Mutex
	outs     []TurnOutput
	errs     []error
	calls    []TurnRequest
	finished []string
}

func (s *scripted) Generate(_ context.Context, req TurnRequest) (TurnOutput, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, TurnRequest{SessionID: req.SessionID, Tokens: slices.Clone(req.Tokens), MaxTokens: req.MaxTokens})
	i := len(s.calls) - 1
	if i < len(s.errs) && s.errs[i] != nil {
		return TurnOutput{}, s.errs[i]
	}
	if i >= len(s.outs) {
		return TurnOutput{}, errors.New("script exhausted")
	}
	return s.outs[i], nil
}

func (s *scripted) FinishSession(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finished = append(s.finished, id)
	return nil
}

// text makes a turn output of text (+EOS when eos) at version v.
func text(s string, eos bool, v int64, finish string) TurnOutput {
	ids := tokenizer.Encode(s)
	if eos {
		ids = append(ids, tokenizer.EOS)
	}
	o := TurnOutput{Tokens: ids, Finish: finish}
	for range ids {
		o.Logprobs = append(o.Logprobs, -0.5)
		o.Versions = append(o.Versions, v)
	}
	return o
}

func testCfg() EpisodeConfig {
	c := DefaultEpisodeConfig()
	c.RetryBackoff = time.Millisecond
	c.TurnTimeout = time.Second
	return c
}

func mustTask(t *testing.T, name string) tasks.Task {
	t.Helper()
	tk, err := tasks.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func TestSingleTurnEpisodeLayout(t *testing.T) {
	gen := &scripted{outs: []TurnOutput{text("cba", true, 3, "stop")}}
	ep, err := RunEpisode(context.Background(), gen, mustTask(t, "reverse"), tasks.Prompt{ID: "p", Text: "rev abc="}, "g#1/0", testCfg())
	if err != nil {
		t.Fatal(err)
	}
	prompt := append([]int32{tokenizer.BOS}, tokenizer.Encode("rev abc=")...)
	if ep.PromptLen != len(prompt) || !slices.Equal(ep.Tokens[:ep.PromptLen], prompt) {
		t.Fatalf("prompt tokens %v, want %v", ep.Tokens[:ep.PromptLen], prompt)
	}
	if ep.Reward != 1 || ep.Turns != 1 || ep.Generated != 4 {
		t.Fatalf("reward %v turns %d generated %d", ep.Reward, ep.Turns, ep.Generated)
	}
	for i := range ep.Tokens {
		wantMask := uint8(0)
		if i >= ep.PromptLen {
			wantMask = 1
		}
		if ep.LossMask[i] != wantMask {
			t.Fatalf("loss mask[%d] = %d, want %d", i, ep.LossMask[i], wantMask)
		}
		if ep.Versions[i] != 3 {
			t.Fatalf("version[%d] = %d, want 3 (context takes the model's version)", i, ep.Versions[i])
		}
		if wantMask == 0 && ep.Logprobs[i] != 0 || wantMask == 1 && ep.Logprobs[i] != -0.5 {
			t.Fatalf("logprob[%d] = %v", i, ep.Logprobs[i])
		}
	}
	if gen.calls[0].SessionID != "g#1/0" || gen.calls[0].MaxTokens != 6 {
		t.Fatalf("request = %+v", gen.calls[0])
	}
}

func TestMultiTurnConversationAccumulates(t *testing.T) {
	// guess 1-20 with seed 7: whatever the hidden number, "10" gets a
	// higher/lower/correct reply, which must be appended as context.
	gen := &scripted{outs: []TurnOutput{text("10", true, 0, "stop"), text("5", true, 1, "stop"), text("15", true, 1, "stop")}}
	cfg := testCfg()
	cfg.MaxTurns = 3
	task := mustTask(t, "guess")
	ep, err := RunEpisode(context.Background(), gen, task, task.Sample(seeded()), "g/1", cfg)
	if err != nil {
		t.Fatal(err)
	}
	if ep.Turns < 2 {
		t.Fatalf("want a multi-turn episode, got %d turns", ep.Turns)
	}
	if len(gen.calls) != ep.Turns {
		t.Fatalf("%d calls for %d turns", len(gen.calls), ep.Turns)
	}
	for i := 1; i < len(gen.calls); i++ {
		prev, cur := gen.calls[i-1].Tokens, gen.calls[i].Tokens
		if !slices.Equal(cur[:len(prev)], prev) || len(cur) <= len(prev)+len(gen.outs[i-1].Tokens) {
			t.Fatalf("turn %d context does not extend turn %d's with its output and an observation", i, i-1)
		}
	}
	gen1 := len(gen.outs[0].Tokens)
	{
		// tokens after the first output up to the second call's end are the observation: mask 0
		obs := ep.Tokens[len(gen.calls[0].Tokens)+gen1 : len(gen.calls[1].Tokens)]
		if len(obs) == 0 {
			t.Fatalf("no observation tokens between turns")
		}
		for i := len(gen.calls[0].Tokens) + gen1; i < len(gen.calls[1].Tokens); i++ {
			if ep.LossMask[i] != 0 {
				t.Fatalf("observation token %d trained", i)
			}
		}
		if ep.OldestVersion() != 0 || !ep.mixed() {
			t.Fatalf("oldest %d mixed %v: want 0 and true (versions 0 then 1)", ep.OldestVersion(), ep.mixed())
		}
	}
}

func TestAbortedCallIsContinued(t *testing.T) {
	// The engine aborts after "c" (abort-mode weight update); the episode
	// continues the same turn from the accumulated tokens on the new version.
	gen := &scripted{outs: []TurnOutput{text("c", false, 0, "abort"), text("ba", true, 1, "stop")}}
	ep, err := RunEpisode(context.Background(), gen, mustTask(t, "reverse"), tasks.Prompt{ID: "p", Text: "rev abc="}, "t", testCfg())
	if err != nil {
		t.Fatal(err)
	}
	if ep.Reward != 1 || ep.Resubmits != 1 || !ep.mixed() {
		t.Fatalf("reward %v resubmits %d mixed %v", ep.Reward, ep.Resubmits, ep.mixed())
	}
	if got := gen.calls[1]; len(got.Tokens) != ep.PromptLen+1 || got.MaxTokens != 5 {
		t.Fatalf("continuation request: %d tokens, max %d", len(got.Tokens), got.MaxTokens)
	}
}

func TestFailedCallsRetriedThenAborted(t *testing.T) {
	down := fmt.Errorf("%w: connection refused", ErrEngine)
	gen := &scripted{errs: []error{down, down}, outs: []TurnOutput{{}, {}, text("cba", true, 0, "stop")}}
	ep, err := RunEpisode(context.Background(), gen, mustTask(t, "reverse"), tasks.Prompt{ID: "p", Text: "rev abc="}, "t", testCfg())
	if err != nil || ep.Reward != 1 || ep.Resubmits != 2 {
		t.Fatalf("two failures then success: err %v reward %v resubmits %d", err, ep.Reward, ep.Resubmits)
	}
	cfg := testCfg()
	cfg.TurnAttempts = 2
	gen = &scripted{errs: []error{down, down, down}}
	_, err = RunEpisode(context.Background(), gen, mustTask(t, "reverse"), tasks.Prompt{ID: "p", Text: "rev abc="}, "t", cfg)
	if !errors.Is(err, ErrAborted) || !errors.Is(err, ErrEngine) || len(gen.calls) != 2 {
		t.Fatalf("err = %v after %d calls; want ErrAborted wrapping ErrEngine after 2", err, len(gen.calls))
	}
	// Aborts that produce nothing count as failures too.
	gen = &scripted{outs: []TurnOutput{{Finish: "abort"}, {Finish: "abort"}}}
	if _, err = RunEpisode(context.Background(), gen, mustTask(t, "reverse"), tasks.Prompt{ID: "p", Text: "rev abc="}, "t", cfg); !errors.Is(err, ErrAborted) {
		t.Fatalf("empty aborts: err = %v", err)
	}
}

func TestCancelledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	gen := &scripted{errs: []error{context.Canceled}}
	if _, err := RunEpisode(ctx, gen, mustTask(t, "reverse"), tasks.Prompt{ID: "p", Text: "rev abc="}, "t", testCfg()); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
}

func TestPromptIDRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		id   string
		base string
		seed int64
	}{
		{PromptID("p12", 99), "p12", 99},
		{PromptID("data.jsonl:3", -5), "data.jsonl:3", -5},
		{"plain", "plain", 0},
		{"a~notanumber", "a~notanumber", 0},
	} {
		base, seed := ParsePromptID(tc.id)
		if base != tc.base || seed != tc.seed {
			t.Errorf("ParsePromptID(%q) = %q, %d; want %q, %d", tc.id, base, seed, tc.base, tc.seed)
		}
	}
}

func TestHTTPClientAgainstEngine(t *testing.T) {
	e, err := engine.New(func() engine.Config { c := engine.DefaultConfig(); c.TimeScale = 0; return c }(), engine.NewHashModel(1))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.SetModel(engine.NewHashModel(2), 7); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler())
	defer func() { srv.Close(); e.Close() }()
	c := &HTTPClient{BaseURL: srv.URL, Model: "asyncrl-policy"}
	out, err := c.Generate(context.Background(), TurnRequest{SessionID: "s", Tokens: []int32{1, 40, 41}, MaxTokens: 5, Temperature: 1, TopP: 0.9, TopK: -1})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Tokens) == 0 || len(out.Tokens) > 5 || len(out.Support) != len(out.Tokens) {
		t.Fatalf("out = %+v", out)
	}
	if len(out.SupportLogprobs) != len(out.Tokens) {
		t.Fatalf("%d support logprobs for %d tokens", len(out.SupportLogprobs), len(out.Tokens))
	}
	for i, v := range out.Versions {
		// Renormalised over a subset, a logprob can only grow.
		if v != 7 || out.Logprobs[i] > 0 || out.SupportLogprobs[i] > 0 || out.SupportLogprobs[i] < out.Logprobs[i] {
			t.Fatalf("token %d: version %d logprob %v support logprob %v", i, v, out.Logprobs[i], out.SupportLogprobs[i])
		}
	}
	if _, err := c.Generate(context.Background(), TurnRequest{Tokens: []int32{1}, MaxTokens: 0}); !errors.Is(err, ErrEngine) {
		t.Fatalf("bad request: err = %v, want ErrEngine", err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := "http://" + ln.Addr().String()
	ln.Close()
	if _, err := (&HTTPClient{BaseURL: dead}).Generate(context.Background(), TurnRequest{Tokens: []int32{1}, MaxTokens: 1}); !errors.Is(err, ErrEngine) {
		t.Fatalf("dead engine: err = %v, want ErrEngine", err)
	}
	defaultClient.CloseIdleConnections()
}

func seeded() *rand.Rand { return rand.New(rand.NewPCG(7, 7)) }

func TestDecideTurn(t *testing.T) {
	for _, tc := range []struct {
		name     string
		r        callResult
		attempts int
		want     turnAction
		failures int
	}{
		{"stop ends the turn", callResult{Tokens: 3, EOS: true, Finish: "stop", Left: 3}, 4, turnDone, 0},
		{"length ends the turn", callResult{Tokens: 6, Finish: "length", Left: 0}, 4, turnDone, 0},
		{"error retried", callResult{Failed: true, Left: 6}, 4, turnRetry, 1},
		{"error on the last attempt aborts", callResult{Failed: true, Failed0: 3, Left: 6}, 4, turnAbort, 4},
		{"abort with tokens continues", callResult{Tokens: 2, Finish: "abort", Left: 4, Failed0: 1}, 4, turnContinue, 1},
		{"abort ending in EOS is done", callResult{Tokens: 2, EOS: true, Finish: "abort", Left: 4}, 4, turnDone, 0},
		{"abort with spent budget is done", callResult{Tokens: 6, Finish: "abort", Left: 0}, 4, turnDone, 0},
		{"empty abort is a failure", callResult{Finish: "abort", Left: 6}, 4, turnRetry, 1},
		{"attempts below 1 mean 1", callResult{Failed: true, Left: 6}, 0, turnAbort, 1},
	} {
		got, f := decideTurn(tc.r, tc.attempts)
		if got != tc.want || f != tc.failures {
			t.Errorf("%s: decideTurn = %d, %d; want %d, %d", tc.name, got, f, tc.want, tc.failures)
		}
	}
}

// withSupport gives every token of o the support set {token, 3} and a
// support-normalised logprob of slp (nil slp: the engine sent none).
func withSupport(o TurnOutput, slp []float32) TurnOutput {
	for _, id := range o.Tokens {
		o.Support = append(o.Support, []int32{id, 3})
	}
	o.SupportLogprobs = slp
	return o
}

// TestSupportLogprobsRecordedAndPacked: the episode records the engine's
// support-normalised logprobs next to the full-vocabulary ones; with
// SupportLogprobs set they become the packed trajectory's logprobs, and an
// answer with support sets but without them is a failed call (retried).
func TestSupportLogprobsRecordedAndPacked(t *testing.T) {
	slp := []float32{-0.1, -0.2, -0.3, -0.4}
	missing := withSupport(text("cba", true, 0, "stop"), nil)
	good := withSupport(text("cba", true, 0, "stop"), slp)
	prompt := tasks.Prompt{ID: "p", Text: "rev abc="}

	ep, err := RunEpisode(context.Background(), &scripted{outs: []TurnOutput{missing}}, mustTask(t, "reverse"), prompt, "a", testCfg())
	if err != nil {
		t.Fatal(err)
	}
	if g := ep.SupportLogprobs[ep.PromptLen:]; len(g) != 4 || g[0] == g[0] {
		t.Fatalf("support logprobs without the engine's values: %v, want NaN", g)
	}
	cfg := testCfg()
	cfg.SupportLogprobs = true
	gen := &scripted{outs: []TurnOutput{missing, good}}
	ep, err = RunEpisode(context.Background(), gen, mustTask(t, "reverse"), prompt, "a", cfg)
	if err != nil || ep.Resubmits != 1 || len(gen.calls) != 2 {
		t.Fatalf("missing support logprobs: err %v, resubmits %d, calls %d; want one retry", err, ep.Resubmits, len(gen.calls))
	}
	if !slices.Equal(ep.SupportLogprobs[ep.PromptLen:], slp) || ep.Logprobs[ep.PromptLen] != -0.5 || ep.SupportLogprobs[0] != 0 {
		t.Fatalf("recorded support logprobs %v, logprobs %v", ep.SupportLogprobs, ep.Logprobs)
	}
	cfg.TurnAttempts = 2
	if _, err := RunEpisode(context.Background(), &scripted{outs: []TurnOutput{missing, missing}}, mustTask(t, "reverse"), prompt, "a", cfg); !errors.Is(err, ErrEngine) {
		t.Fatalf("an engine that never sends support logprobs: err %v, want ErrEngine", err)
	}
	// No filter: no support set, and the support logprob is the full one.
	ep, err = RunEpisode(context.Background(), &scripted{outs: []TurnOutput{text("cba", true, 0, "stop")}}, mustTask(t, "reverse"), prompt, "a", cfg)
	if err != nil || ep.SupportLogprobs[ep.PromptLen] != -0.5 {
		t.Fatalf("unfiltered: err %v, support logprob %v", err, ep.SupportLogprobs)
	}

	for _, over := range []bool{false, true} {
		ep, err := RunEpisode(context.Background(), &scripted{outs: []TurnOutput{good}}, mustTask(t, "reverse"), prompt, "g/0", testCfg())
		if err != nil {
			t.Fatal(err)
		}
		a := &Actor{cfg: Config{RunID: "r", Name: "ro", SupportK: 2}}
		a.cfg.Episode.SupportLogprobs = over
		gr, err := a.pack(messages.PromptAssigned{GroupID: "g", PromptID: "p"}, []result{{ep: ep}})
		if err != nil {
			t.Fatal(err)
		}
		tb, err := messages.DecodeTokenBatch(gr.Batch.Inline)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := tb.Trajectory(0)
		if err != nil {
			t.Fatal(err)
		}
		want := ep.Logprobs
		if over {
			want = ep.SupportLogprobs
		}
		if !slices.Equal(tr.Logprobs, want) {
			t.Fatalf("SupportLogprobs=%v: packed logprobs %v, want %v", over, tr.Logprobs, want)
		}
	}
}
