package enginetest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"

	"github.com/asyncrl/asyncrl/engine/driver"
)

// FakeOptions shape a fake engine.
type FakeOptions struct {
	// DevMode serves vLLM's dev-mode routes (VLLM_SERVER_DEV_MODE=1);
	// without it they answer the not_found fixture (404).
	DevMode bool
	// LoRA serves the runtime LoRA routes.
	LoRA bool
	// Extension loads asyncrl's worker extension: without it every
	// asyncrl_* collective_rpc answers the collective_rpc_missing_method
	// fixture (500).
	Extension bool
	// Workers is the number of results collective_rpc answers (default 1).
	Workers int
	// Skew makes the last worker (with Workers > 1) report a version one
	// behind the others.
	Skew bool

	// SGLang's scheduler (sglangfake.go). SGLangRelease is the release
	// the fake reports and behaves as (default SGLangDefaultRelease);
	// GenerateFor is how long one /generate runs unpaused (default 0:
	// answers at once); SGLangHealthTimeout is how long /health waits on
	// a paused scheduler before its 503 (SGLANG_HEALTH_CHECK_TIMEOUT,
	// default 20 s); SGLangRoutes reports --enable-return-routed-experts;
	// SGLangAbortLag is how long an aborted request stays in the running
	// batch (the abort is asynchronous).
	SGLangAbortLag      time.Duration
	SGLangRelease       string
	GenerateFor         time.Duration
	SGLangHealthTimeout time.Duration
	SGLangRoutes        bool
}

// Call is one request a fake received.
type Call struct {
	Method, Path, Query string
	Body                []byte
}

// Fake is an httptest server answering an engine kind's routes with its
// fixtures' documented bodies. It keeps just enough state to answer
// consistently: pause flag, the version loaded through collective_rpc.
type Fake struct {
	*httptest.Server
	Kind driver.Kind
	Opts FakeOptions

	mu      sync.Mutex
	calls   []Call
	paused  bool
	version int64
	sg      *sgState // SGLang's scheduler; nil for other kinds
}

// NewFake starts a fake engine of kind (vllm or sglang) from the fixtures.
func NewFake(kind driver.Kind, opts FakeOptions) *Fake {
	if opts.Workers <= 0 {
		opts.Workers = 1
	}
	f := &Fake{Kind: kind, Opts: opts}
	fx := MustFixtures(kind)
	mux := http.NewServeMux()
	seen := map[string]bool{}
	if kind == driver.KindSGLang {
		f.initSGLang()
		f.sglangRoutes(mux, fx, seen)
	}
	for _, fix := range fx {
		if fix.Status < 200 || fix.Status > 299 {
			continue
		}
		key := fix.Method + " " + fix.Path
		if seen[key] {
			continue
		}
		seen[key] = true
		mux.HandleFunc(key, f.handler(fix, fx))
	}
	f.Server = httptest.NewServer(f.record(mux))
	return f
}

// Calls returns the requests received so far.
func (f *Fake) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Call(nil), f.calls...)
}

// Last returns the last request to path (ok false when none).
func (f *Fake) Last(path string) (Call, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.calls) - 1; i >= 0; i-- {
		if f.calls[i].Path == path {
			return f.calls[i], true
		}
	}
	return Call{}, false
}

func (f *Fake) record(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.calls = append(f.calls, Call{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Body: body})
		f.mu.Unlock()
		r.Body = io.NopCloser(&byteReader{b: body})
		h.ServeHTTP(w, r)
	})
}

type byteReader struct{ b []byte }

func (r *byteReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

func writeFixture(w http.ResponseWriter, fix *Fixture) {
	if fix.IsJSON() {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(fix.Status)
	_, _ = w.Write(fix.Body())
}

func (f *Fake) handler(fix *Fixture, all map[string]*Fixture) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if fix.DevMode && !f.Opts.DevMode {
			writeFixture(w, all["not_found"])
			return
		}
		if fix.LoRA && !f.Opts.LoRA {
			writeFixture(w, all["not_found"])
			return
		}
		switch fix.Path {
		case "/pause", "/pause_generation":
			f.setPaused(true)
		case "/resume", "/continue_generation":
			f.setPaused(false)
		case "/is_paused":
			f.mu.Lock()
			p := f.paused
			f.mu.Unlock()
			writeJSON(w, map[string]bool{"is_paused": p})
			return
		case "/collective_rpc":
			f.collectiveRPC(w, r, all)
			return
		case "/v1/completions":
			completion(w, r, fix)
			return
		case "/generate":
			generate(w, r, fix)
			return
		}
		writeFixture(w, fix)
	}
}

func (f *Fake) setPaused(p bool) {
	f.mu.Lock()
	f.paused = p
	f.mu.Unlock()
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// collectiveRPC answers like vLLM with asyncrl's extension
// (integrations/vllm): loads set the version and answer {"version": v} per
// worker; asyncrl_loaded_version answers the int, stringified by vLLM.
func (f *Fake) collectiveRPC(w http.ResponseWriter, r *http.Request, all map[string]*Fixture) {
	var req struct {
		Method string            `json:"method"`
		Args   []json.RawMessage `json:"args"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Method == "" {
		w.WriteHeader(http.StatusBadRequest)
		writeJSON(w, map[string]string{"detail": "Missing 'method' in request body"})
		return
	}
	known := map[string]bool{driver.RPCLoadCheckpoint: true, driver.RPCApplyDelta: true, driver.RPCLoadedVersion: true}
	if !f.Opts.Extension || !known[req.Method] {
		miss := *all["collective_rpc_missing_method"]
		miss.Response = json.RawMessage(fmt.Sprintf(`{"error":{"message":"'Worker' object has no attribute '%s'","type":"InternalServerError","param":null,"code":500}}`, req.Method))
		writeFixture(w, &miss)
		return
	}
	f.mu.Lock()
	if req.Method != driver.RPCLoadedVersion && len(req.Args) == 2 {
		var s string
		if json.Unmarshal(req.Args[1], &s) == nil {
			if v, err := strconv.ParseInt(s, 10, 64); err == nil {
				f.version = v
			}
		}
	}
	v := f.version
	f.mu.Unlock()
	results := make([]any, f.Opts.Workers)
	for i := range results {
		wv := v
		if f.Opts.Skew && f.Opts.Workers > 1 && i == f.Opts.Workers-1 {
			wv = v - 1
		}
		if req.Method == driver.RPCLoadedVersion {
			results[i] = strconv.FormatInt(wv, 10) // an int, stringified by vLLM
		} else {
			results[i] = map[string]int64{"version": wv} // asyncrl_vllm's load result
		}
	}
	writeJSON(w, map[string]any{"results": results})
}

// completion answers the completions fixture as vLLM would answer the
// request: the prompt echoed in prompt_token_ids and at most max_tokens
// tokens (the fixture's, cut).
func completion(w http.ResponseWriter, r *http.Request, fix *Fixture) {
	var req struct {
		Prompt    []int32 `json:"prompt"`
		MaxTokens int     `json:"max_tokens"`
	}
	var resp map[string]any
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || json.Unmarshal(fix.Response, &resp) != nil {
		w.WriteHeader(http.StatusBadRequest)
		writeJSON(w, map[string]any{"error": map[string]any{"message": "bad request", "type": "BadRequestError", "param": nil, "code": 400}})
		return
	}
	ch := resp["choices"].([]any)[0].(map[string]any)
	ch["prompt_token_ids"] = req.Prompt
	n := len(ch["token_ids"].([]any))
	if req.MaxTokens > 0 && req.MaxTokens < n {
		n = req.MaxTokens
		ch["token_ids"] = ch["token_ids"].([]any)[:n]
		lp := ch["logprobs"].(map[string]any)
		for _, k := range []string{"text_offset", "token_logprobs", "tokens", "top_logprobs"} {
			lp[k] = lp[k].([]any)[:n]
		}
	}
	writeJSON(w, resp)
}

// generate answers SGLang's /generate fixture cut to max_new_tokens.
func generate(w http.ResponseWriter, r *http.Request, fix *Fixture) {
	var req struct {
		SamplingParams struct {
			MaxNewTokens int `json:"max_new_tokens"`
		} `json:"sampling_params"`
	}
	var resp map[string]any
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || json.Unmarshal(fix.Response, &resp) != nil {
		w.WriteHeader(http.StatusBadRequest)
		writeJSON(w, map[string]any{"object": "error", "message": "bad request", "type": "Bad Request", "param": nil, "code": 400})
		return
	}
	if n := req.SamplingParams.MaxNewTokens; n > 0 && n < len(resp["output_ids"].([]any)) {
		resp["output_ids"] = resp["output_ids"].([]any)[:n]
		meta := resp["meta_info"].(map[string]any)
		meta["output_token_logprobs"] = meta["output_token_logprobs"].([]any)[:n]
		meta["completion_tokens"] = n
	}
	writeJSON(w, resp)
}
