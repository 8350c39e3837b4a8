package weightsync

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/actors/rollout"
	"github.com/asyncrl/asyncrl/actors/router/policy"
	"github.com/asyncrl/asyncrl/actors/router/proxy"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/engine/driver"
)

// kvEngine is a vLLM-shaped engine whose KV remembers which weight
// version computed every position: the oracle of the keep-mode test. It
// keeps vLLM's rules that matter here: a prefix cache of full blocks
// (blockSize tokens) reused by any later request with the same prefix; a
// keep pause freezes running requests with their KV; POST
// /reset_prefix_cache refuses (quietly, 200) while running requests hold
// blocks unless reset_running_requests=true, which preempts them so their
// KV is recomputed on the weights installed then
// (vllm/v1/core/sched/scheduler.py@00024d314514900f361ad072af6931e403b7f589,
// Scheduler.reset_prefix_cache); oldRelease drops that parameter, as a
// release before it does. Every generated token is recorded with the
// oldest version among the weights that computed it and the KV it attended
// to (minKV).
type kvEngine struct {
	t          *testing.T
	oldRelease bool
	failReset  bool   // /reset_prefix_cache answers 500
	release    string // GET /version answers it when set
	srv        *httptest.Server
	pauses     []string // pause modes asked, in order

	mu      sync.Mutex
	cond    *sync.Cond
	version int64
	paused  bool
	cache   map[string][]int64 // prefix of whole blocks → its positions' versions
	running map[*kvReq]bool
	minKV   map[string][]int64 // prompt key → per generated token
}

type kvReq struct {
	tokens []int32
	kv     []int64 // version that computed each position's KV
}

const kvBlock = 4

func newKVEngine(t *testing.T, oldRelease bool) *kvEngine {
	e := &kvEngine{t: t, oldRelease: oldRelease, cache: map[string][]int64{}, running: map[*kvReq]bool{}, minKV: map[string][]int64{}}
	e.cond = sync.NewCond(&e.mu)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("GET /version", func(w http.ResponseWriter, r *http.Request) {
		if e.release == "" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, `{"version":%q}`, e.release)
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"object":"list","data":[{"id":"m","object":"model"}]}`)
	})
	mux.HandleFunc("POST /pause", func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.pauses = append(e.pauses, r.URL.Query().Get("mode"))
		if r.URL.Query().Get("mode") == "abort" {
			for q := range e.running { // ended with partial output; blocks freed
				delete(e.running, q)
			}
		}
		e.paused = true
		fmt.Fprint(w, `{"status":"paused"}`)
	})
	mux.HandleFunc("POST /resume", func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		e.paused = false
		e.cond.Broadcast()
		e.mu.Unlock()
	})
	mux.HandleFunc("POST /reset_prefix_cache", func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.failReset {
			http.Error(w, "reset failed", http.StatusInternalServerError)
			return
		}
		resetRunning := r.URL.Query().Get("reset_running_requests") == "true" && !e.oldRelease
		if resetRunning {
			for q := range e.running { // preempted: recomputed on the weights now installed
				for i := range q.kv {
					q.kv[i] = e.version
				}
			}
		} else if len(e.running) > 0 {
			return // vLLM: "Failed to reset prefix cache because some blocks are not freed yet"
		}
		clear(e.cache)
	})
	mux.HandleFunc("POST /collective_rpc", func(w http.ResponseWriter, r *http.Request) {
		var req driver.CollectiveRPCRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Method != driver.RPCLoadCheckpoint || len(req.Args) != 2 {
			http.Error(w, "bad rpc", http.StatusBadRequest)
			return
		}
		v, _ := strconv.ParseInt(req.Args[1], 10, 64)
		e.mu.Lock()
		e.version = v
		e.mu.Unlock()
		fmt.Fprintf(w, `{"results":[{"version":%d}]}`, v)
	})
	mux.HandleFunc("POST /v1/completions", e.complete)
	e.srv = httptest.NewServer(mux)
	t.Cleanup(e.srv.Close)
	return e
}

func key(tokens []int32) string { return fmt.Sprint(tokens) }

// complete prefills the prompt (cached blocks reused with their versions)
// and decodes one token per 2 ms while not paused.
func (e *kvEngine) complete(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Prompt    []int32 `json:"prompt"`
		MaxTokens int     `json:"max_tokens"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	e.mu.Lock()
	for e.paused {
		e.cond.Wait()
	}
	q := &kvReq{tokens: append([]int32(nil), body.Prompt...)}
	for end := kvBlock; end <= len(q.tokens); end += kvBlock {
		vs, ok := e.cache[key(q.tokens[:end])]
		if !ok {
			break
		}
		q.kv = append(q.kv[:0], vs...)
	}
	for len(q.kv) < len(q.tokens) {
		q.kv = append(q.kv, e.version)
	}
	e.running[q] = true
	var out []int32
	var minKV []int64
	for len(out) < body.MaxTokens {
		e.mu.Unlock()
		time.Sleep(2 * time.Millisecond)
		e.mu.Lock()
		for e.paused {
			e.cond.Wait()
		}
		m := e.version // the weights computing this token
		for _, v := range q.kv {
			m = min(m, v)
		}
		tok := (q.tokens[len(q.tokens)-1] + 1) % 100
		out = append(out, tok)
		minKV = append(minKV, m)
		q.tokens = append(q.tokens, tok)
		q.kv = append(q.kv, e.version)
	}
	delete(e.running, q)
	for end := kvBlock; end <= len(q.tokens); end += kvBlock {
		if _, ok := e.cache[key(q.tokens[:end])]; !ok {
			e.cache[key(q.tokens[:end])] = append([]int64(nil), q.kv[:end]...)
		}
	}
	e.minKV[key(body.Prompt)] = minKV
	e.mu.Unlock()
	lps := make([]float64, len(out))
	ans := map[string]any{"choices": []map[string]any{{
		"index": 0, "finish_reason": "length", "token_ids": out, "prompt_token_ids": body.Prompt,
		"logprobs": map[string]any{"token_logprobs": lps},
	}}}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(ans)
}

func (e *kvEngine) runningTokens() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for q := range e.running {
		n = max(n, len(q.tokens))
	}
	return n
}

// keepSwapViolations runs the keep-mode scenario against the engine and
// returns the tokens stamped with a newer version than their KV came from.
//
// Through the real router and rollout client: A fills the prefix cache at
// version 0; B is in flight when the keep swap to version 1 runs through
// Driven.swap (the driver over HTTP); the router learns version 1 (the
// ack); C then shares A's first two blocks.
func keepSwapViolations(t *testing.T, e *kvEngine) (violations []string, cMin []int64) {
	cfg := proxy.DefaultConfig()
	cfg.HealthInterval, cfg.MetricsInterval = 0, 0
	cfg.Replicas = []string{e.srv.URL}
	r, err := proxy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rsrv := httptest.NewServer(r.Handler())
	defer rsrv.Close()
	defer func() { _ = r.Shutdown(context.Background()) }()
	if err := r.Apply(policy.SetVersion{URL: e.srv.URL, Version: 0}); err != nil {
		t.Fatal(err)
	}
	client := &rollout.HTTPClient{BaseURL: rsrv.URL, Model: "m"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gen := func(session string, prompt []int32, n int) rollout.TurnOutput {
		out, err := client.Generate(ctx, rollout.TurnRequest{SessionID: session, Tokens: prompt, MaxTokens: n, Temperature: 1})
		if err != nil {
			t.Error(err)
		}
		return out
	}
	promptA := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	promptB := []int32{50, 51, 52, 53, 54}
	promptC := []int32{1, 2, 3, 4, 5, 6, 7, 8, 60}
	outs := map[string]rollout.TurnOutput{}
	outs[key(promptA)] = gen("a", promptA, 4)

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		o := gen("b", promptB, 60)
		e.mu.Lock()
		outs[key(promptB)] = o
		e.mu.Unlock()
	}()
	for deadline := time.Now().Add(10 * time.Second); e.runningTokens() < len(promptB)+3; {
		if time.Now().After(deadline) {
			t.Fatal("request B never got going")
		}
		time.Sleep(time.Millisecond)
	}
	d, err := driver.New(driver.KindVLLM, e.srv.URL, driver.Options{Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	dr := &Driven{Name: "kv", URL: e.srv.URL, Driver: d, Load: config.LoadFull}
	if err := dr.swap(ctx, string(config.PauseKeep), func() error { return d.LoadCheckpoint(ctx, "/ckpt/v1", 1) }); err != nil {
		t.Fatal(err)
	}
	if err := r.Apply(policy.SetVersion{URL: e.srv.URL, Version: 1}); err != nil {
		t.Fatal(err)
	}
	outC := gen("c", promptC, 4)
	wg.Wait()
	outs[key(promptC)] = outC

	e.mu.Lock()
	defer e.mu.Unlock()
	for name, p := range map[string][]int32{"A": promptA, "B": promptB, "C": promptC} {
		o, truth := outs[key(p)], e.minKV[key(p)]
		if len(o.Versions) != len(truth) || len(truth) == 0 {
			t.Fatalf("%s: %d stamped versions for %d tokens the engine made", name, len(o.Versions), len(truth))
		}
		for i, v := range o.Versions {
			if v > truth[i] {
				violations = append(violations, fmt.Sprintf("%s token %d stamped v%d, computed on KV from v%d", name, i, v, truth[i]))
			}
		}
	}
	return violations, e.minKV[key(promptC)]
}

// A keep-mode swap leaves no token stamped with a version its KV did not
// come from: the swap recomputes the frozen requests' KV and drops the
// old weights' prefix blocks before resuming.
func TestKeepSwapStampsNoTokenNewerThanItsKV(t *testing.T) {
	e := newKVEngine(t, false)
	e.release = "0.17.0"
	violations, cMin := keepSwapViolations(t, e)
	for _, v := range violations {
		t.Error(v)
	}
	for i, v := range cMin {
		if v != 1 {
			t.Errorf("C token %d computed on KV from v%d after the swap to v1: the old prefix blocks were reused", i, v)
		}
	}
}

// The oracle sees the bug it guards against: on an engine that drops
// reset_running_requests (here one that claims 0.17.0 and drops it; a
// release before 0.17.0, or one that does not say, swaps keep as abort
// instead), the reset is refused while B holds blocks, C reuses A's
// version-0 blocks and its tokens are stamped version 1.
func TestKeepSwapWithoutRunningResetReusesStaleBlocks(t *testing.T) {
	e := newKVEngine(t, true)
	e.release = "0.17.0" // claims the parameter, drops it
	violations, _ := keepSwapViolations(t, e)
	if len(violations) == 0 {
		t.Fatal("no token stamped newer than its KV on a release without reset_running_requests: the oracle cannot see the bug")
	}
}

// TestKeepSwapFallsBackToAbort: where the frozen requests' KV cannot be
// dropped, a keep swap aborts them (with the cache) instead of resuming
// them on KV the old weights made — after the load when the reset fails
// (also when the swap's context ended as the load did: the abort has its
// own deadline), from the start when the release cannot reset running
// requests (vLLM 0.16) or does not say its release. Every case ends
// resumed, serving version 1.
func TestKeepSwapFallsBackToAbort(t *testing.T) {
	cases := []struct {
		name, release string
		oldRelease    bool // reset_running_requests dropped
		failReset     bool // /reset_prefix_cache answers 500
		cancelAtLoad  bool // the swap's context ends as the load does
		pauses        string
	}{
		{name: "reset fails", release: "0.17.0", failReset: true, pauses: "[keep abort]"},
		{name: "context ended", release: "0.17.0", cancelAtLoad: true, pauses: "[keep abort]"},
		{name: "0.16 has no running reset", release: "0.16.2", oldRelease: true, pauses: "[abort]"},
		{name: "release unknown", pauses: "[abort]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newKVEngine(t, tc.oldRelease)
			e.release, e.failReset = tc.release, tc.failReset
			d, err := driver.New(driver.KindVLLM, e.srv.URL, driver.Options{Model: "m"})
			if err != nil {
				t.Fatal(err)
			}
			dr := &Driven{Name: "kv", URL: e.srv.URL, Driver: d, Load: config.LoadFull}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			err = dr.swap(ctx, string(config.PauseKeep), func() error {
				err := d.LoadCheckpoint(ctx, "/ckpt/v1", 1)
				if tc.cancelAtLoad {
					cancel()
				}
				return err
			})
			if err != nil {
				t.Fatalf("swap: %v (the abort fallback should have succeeded)", err)
			}
			e.mu.Lock()
			defer e.mu.Unlock()
			if fmt.Sprint(e.pauses) != tc.pauses || e.paused || e.version != 1 {
				t.Fatalf("pauses %v, paused %v, version %d; want %s, resumed, version 1", e.pauses, e.paused, e.version, tc.pauses)
			}
		})
	}
}

// swapPause: keep stays keep (and drops the KV after the load) only where
// the engine can drop running requests' KV; abort and wait pass as asked.
func TestSwapPause(t *testing.T) {
	for _, tc := range []struct {
		mode      string
		resets    bool
		pause     driver.PauseMode
		dropAfter bool
	}{
		{"keep", true, driver.PauseKeep, true},
		{"keep", false, driver.PauseAbort, false},
		{"abort", true, driver.PauseAbort, false},
		{"abort", false, driver.PauseAbort, false},
		{"wait", true, driver.PauseWait, false},
		{"wait", false, driver.PauseWait, false},
	} {
		p, drop := swapPause(tc.mode, tc.resets)
		if p != tc.pause || drop != tc.dropAfter {
			t.Errorf("swapPause(%s, resets %v) = %s, %v; want %s, %v", tc.mode, tc.resets, p, drop, tc.pause, tc.dropAfter)
		}
	}
}
