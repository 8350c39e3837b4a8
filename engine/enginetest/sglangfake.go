package enginetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/asyncrl/asyncrl/engine/driver"
)

// The SGLang fake's scheduler models what SGLang's scheduler and tokenizer
// manager do with running requests across pause, weight update, flush and
// health, from their source:
//
//   - /pause_generation {"mode"}: abort ends every request — asynchronously,
//     the aborted requests leave the running batch when their next step
//     sees the abort (AReaL's race: a flush right after still finds them);
//     in_place freezes them in the running batch; retract moves them back to
//     the waiting queue (io_struct.PauseGenerationReqInput,
//     sgl-project/sglang PR #10071). Releases before the modes read no body
//     and abort. abort is the tokenizer manager's alone (it sends the
//     scheduler abort_all and never a pause: tokenizer_manager
//     pause_generation), in_place and retract pause the scheduler, whose
//     event loop then runs no batch (event_loop_normal: "if
//     self._engine_paused: continue") until /continue_generation. A
//     running request's abort takes effect only at its next forward pass
//     (Scheduler.abort_request sets to_finish), so requests frozen in_place
//     and then aborted stay in the running batch for as long as the
//     scheduler stays paused.
//   - /update_weights_from_disk: while not paused the tokenizer manager
//     takes model_update_lock's writer side, which waits for every request
//     in flight; while paused (releases with the modes) it goes straight to
//     the scheduler (tokenizer_manager.update_weights_from_disk, "Immediately
//     update the weights if the engine is in paused state"). After loading,
//     the scheduler flushes when flush_cache (default true; releases before
//     PR #10071 flush always) and asserts the flush succeeded
//     (scheduler_update_weights_mixin.py, "Cache flush failed after
//     updating weights",
//     sgl-project/sglang@c20e3fec6e8034282664271d008f57af91fda560): a flush
//     with requests in the running batch fails, and the assertion kills the
//     scheduler. The fake then dies like the server: every route answers
//     500 for ever.
//   - /flush_cache answers 400 while requests run or wait, and never
//     asserts (http_server.py flush_cache,
//     sgl-project/sglang@0025436eab0556737d615b36a4dd3e1e26e82f3d).
//   - /health and /health_generate run a one-token generation and answer
//     503 when the scheduler sends nothing for SGLANG_HEALTH_CHECK_TIMEOUT
//     (20 s): a paused scheduler never does (same http_server.py).
//   - a disk update renames the served model to the checkpoint path
//     (tokenizer_manager._wait_for_model_update_from_disk sets
//     served_model_name = model_path); server_args.served_model_name, which
//     /get_server_info reports, keeps the launch name.

// sgReq is one generation in the fake scheduler.
type sgReq struct {
	ran       time.Duration // time spent running (not paused)
	aborted   bool
	retracted bool
}

// sgState is the scheduler's state, under Fake.mu.
type sgState struct {
	pause      string // "", abort, in_place, retract
	frozen     bool   // the scheduler is paused (in_place or retract): it steps no batch
	running    map[*sgReq]struct{}
	dead       string // the assertion that killed it
	served     string // /v1/models' id: follows model_path after a disk update
	launchName string
	version    string
	flushes    int
	changed    chan struct{}
}

// SGLangDefaultRelease is the release the SGLang fake reports when
// FakeOptions.SGLangRelease is empty.
const SGLangDefaultRelease = "0.5.20"

func (f *Fake) initSGLang() {
	name := "Qwen/Qwen3-0.6B" // the models fixture's id
	f.sg = &sgState{running: map[*sgReq]struct{}{}, served: name, launchName: name, changed: make(chan struct{})}
	if f.Opts.SGLangRelease == "" {
		f.Opts.SGLangRelease = SGLangDefaultRelease
	}
	if f.Opts.SGLangHealthTimeout == 0 {
		f.Opts.SGLangHealthTimeout = 20 * time.Second
	}
}

// sglangHas reports whether the fake's release has f (by driver's table).
func (f *Fake) sglangHas(feat driver.Feature) bool {
	rel, err := driver.ParseRelease(f.Opts.SGLangRelease)
	if err != nil {
		panic(err)
	}
	return driver.CapabilitiesFor(driver.KindSGLang, rel, driver.SGLangFeatures).Has(feat)
}

// notify wakes every waiting handler. Caller holds f.mu.
func (f *Fake) notify() {
	close(f.sg.changed)
	f.sg.changed = make(chan struct{})
}

// Died returns the assertion that killed the fake SGLang scheduler, ""
// while it lives.
func (f *Fake) Died() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sg == nil {
		return ""
	}
	return f.sg.dead
}

// Running returns the number of requests in the fake scheduler's running
// batch, Flushes the number of successful cache flushes.
func (f *Fake) Running() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.runningLocked()
}

func (f *Fake) runningLocked() int {
	n := 0
	for r := range f.sg.running {
		if !r.retracted {
			n++
		}
	}
	return n
}

// Flushes is the number of cache flushes that succeeded.
func (f *Fake) Flushes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sg.flushes
}

// sglangRoutes are the routes the scheduler answers itself.
func (f *Fake) sglangRoutes(mux *http.ServeMux, fx map[string]*Fixture, seen map[string]bool) {
	routes := map[string]http.HandlerFunc{
		"POST /generate":                 f.sgGenerate(fx["generate"]),
		"POST /pause_generation":         f.sgPause,
		"POST /continue_generation":      f.sgContinue,
		"POST /flush_cache":              f.sgFlush,
		"POST /update_weights_from_disk": f.sgUpdate,
		"GET /health":                    f.sgHealth,
		"GET /health_generate":           f.sgHealth,
		"GET /v1/models":                 f.sgModels,
		"GET /get_model_info":            f.sgModelInfo,
		"GET /get_server_info":           f.sgServerInfo,
		"POST /v1/completions":           f.sgCompletions(fx),
	}
	for key, h := range routes {
		seen[key] = true
		mux.HandleFunc(key, f.alive(h))
	}
}

// alive answers 500 for ever once the scheduler asserted.
func (f *Fake) alive(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if d := f.Died(); d != "" {
			http.Error(w, "scheduler died: AssertionError: "+d, http.StatusInternalServerError)
			return
		}
		h(w, r)
	}
}

// die kills the scheduler. Caller holds f.mu.
func (f *Fake) die(why string) {
	if f.sg.dead == "" {
		f.sg.dead = why
	}
	f.notify()
}

// sgGenerate runs one generation for FakeOptions.GenerateFor of
// unpaused time (requests arriving while paused wait in the tokenizer
// manager, outside the scheduler), then answers the fixture.
func (f *Fake) sgGenerate(fix *Fixture) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := &sgReq{}
		f.mu.Lock()
		if !f.waitLocked(r.Context(), func() bool { return f.sg.pause != "" && f.sg.dead == "" }) {
			return
		}
		f.sg.running[req] = struct{}{}
		f.mu.Unlock()
		defer func() {
			f.mu.Lock()
			delete(f.sg.running, req)
			f.notify()
			f.mu.Unlock()
		}()
		last := time.Now()
		for {
			f.mu.Lock()
			now := time.Now()
			if f.sg.pause == "" {
				req.ran += now.Sub(last)
			}
			last = now
			dead, aborted, done := f.sg.dead, req.aborted && (!f.sg.frozen || req.retracted), req.ran >= f.Opts.GenerateFor
			ch := f.sg.changed
			f.mu.Unlock()
			switch {
			case dead != "":
				http.Error(w, "scheduler died", http.StatusInternalServerError)
				return
			case aborted:
				// The aborted request leaves the batch at a later step.
				select {
				case <-time.After(f.Opts.SGLangAbortLag):
				case <-r.Context().Done():
					return
				}
				writeJSON(w, map[string]any{"text": "", "output_ids": []int{}, "meta_info": map[string]any{
					"id": "abort", "finish_reason": map[string]any{"type": "abort", "message": "Abort before weight update"},
					"prompt_tokens": 0, "completion_tokens": 0, "output_token_logprobs": []any{}}})
				return
			case done:
				r.Body = io.NopCloser(bytes.NewReader(body))
				generate(w, r, fix)
				return
			}
			step := f.Opts.GenerateFor - req.ran
			select {
			case <-ch:
			case <-time.After(max(step, time.Millisecond)):
			case <-r.Context().Done():
				return
			}
		}
	}
}

func (f *Fake) sgPause(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Mode string `json:"mode"`
	}
	_ = json.NewDecoder(r.Body).Decode(&in)
	mode := in.Mode
	if mode == "" || !f.sglangHas(driver.FeatureSGLangPauseModes) {
		mode = "abort" // the default; releases without modes read no body
	}
	if mode != "abort" && mode != "in_place" && mode != "retract" {
		w.WriteHeader(http.StatusBadRequest)
		writeJSON(w, map[string]any{"object": "error", "message": fmt.Sprintf("Invalid mode: %q", mode), "code": 400})
		return
	}
	f.mu.Lock()
	f.sg.pause = mode
	if mode != "abort" {
		f.sg.frozen = true // an abort pause leaves a frozen scheduler frozen
	}
	for req := range f.sg.running {
		switch mode {
		case "abort":
			req.aborted = true // leaves the batch at its next step: asynchronous
		case "retract":
			req.retracted = true
		}
	}
	f.notify()
	f.mu.Unlock()
	writeJSON(w, map[string]string{"message": "Generation paused successfully.", "status": "ok"})
}

func (f *Fake) sgContinue(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.sg.pause, f.sg.frozen = "", false
	for req := range f.sg.running {
		req.retracted = false
	}
	f.notify()
	f.mu.Unlock()
	writeJSON(w, map[string]string{"message": "Generation continued successfully.", "status": "ok"})
}

// flushLocked is Scheduler.flush_cache: it succeeds only with nothing in
// the running batch (retracted requests wait without KV: a retract pause
// allows the flush, io_struct.PauseGenerationReqInput).
func (f *Fake) flushLocked() bool {
	if f.runningLocked() > 0 {
		return false
	}
	f.sg.flushes++
	return true
}

func (f *Fake) sgFlush(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	ok := f.flushLocked()
	f.mu.Unlock()
	if !ok {
		w.WriteHeader(http.StatusBadRequest)
	}
	_, _ = w.Write([]byte(*MustFixtures(driver.KindSGLang)["flush_cache"].ResponseText))
}

func (f *Fake) sgUpdate(w http.ResponseWriter, r *http.Request) {
	in := struct {
		ModelPath     string  `json:"model_path"`
		WeightVersion *string `json:"weight_version"`
		FlushCache    *bool   `json:"flush_cache"`
	}{}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.ModelPath == "" {
		w.WriteHeader(http.StatusBadRequest)
		writeJSON(w, map[string]any{"object": "error", "message": "model_path is required", "code": 400})
		return
	}
	modes := f.sglangHas(driver.FeatureSGLangPauseModes)
	flush := in.FlushCache == nil || *in.FlushCache || !modes
	f.mu.Lock()
	// The writer lock: unless paused (on a release that skips it then),
	// wait for every request in flight.
	if !f.waitLocked(r.Context(), func() bool { return (f.sg.pause == "" || !modes) && len(f.sg.running) > 0 && f.sg.dead == "" }) {
		return
	}
	if flush && !f.flushLocked() {
		f.die(fmt.Sprintf("Cache flush failed after updating weights (#running-req: %d)", f.runningLocked()))
		f.mu.Unlock()
		http.Error(w, "scheduler died", http.StatusInternalServerError)
		return
	}
	f.sg.served = in.ModelPath
	msg := "Succeeded to update model weights."
	if in.WeightVersion != nil {
		f.sg.version = *in.WeightVersion
		msg += " Weight version updated to " + *in.WeightVersion + "."
	}
	f.mu.Unlock()
	writeJSON(w, map[string]any{"success": true, "message": msg, "num_paused_requests": 0})
}

func (f *Fake) sgHealth(w http.ResponseWriter, r *http.Request) {
	deadline := time.After(f.Opts.SGLangHealthTimeout)
	for {
		f.mu.Lock()
		paused, ch := f.sg.pause != "", f.sg.changed
		f.mu.Unlock()
		if !paused {
			w.WriteHeader(http.StatusOK)
			return
		}
		select {
		case <-ch:
		case <-deadline:
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		case <-r.Context().Done():
			return
		}
	}
}

func (f *Fake) sgModels(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	name := f.sg.served
	f.mu.Unlock()
	writeJSON(w, map[string]any{"object": "list", "data": []any{map[string]any{
		"id": name, "object": "model", "created": 1764633600, "owned_by": "sglang", "root": name, "max_model_len": 40960}}})
}

func (f *Fake) sgModelInfo(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	writeJSON(w, map[string]any{"model_path": f.sg.served, "tokenizer_path": f.sg.launchName, "is_generation": true,
		"preferred_sampling_params": nil, "weight_version": f.sg.version})
}

func (f *Fake) sgServerInfo(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	writeJSON(w, map[string]any{"model_path": f.sg.served, "served_model_name": f.sg.launchName,
		"enable_lora": f.Opts.LoRA, "enable_metrics": true, "enable_return_routed_experts": f.Opts.SGLangRoutes,
		"max_running_requests": 128, "internal_states": []any{}, "version": f.Opts.SGLangRelease})
}

// sgCompletions answers /v1/completions as the fake's release does: with
// per-choice token_ids and prompt_token_ids only on a release with PR
// #30917 and return_token_ids set (completions_token_ids fixture), else
// text only (completions fixture).
func (f *Fake) sgCompletions(fx map[string]*Fixture) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			ReturnTokenIDs bool `json:"return_token_ids"`
		}
		body, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(body, &in)
		fix := fx["completions"]
		if in.ReturnTokenIDs && f.sglangHas(driver.FeatureSGLangCompletionsTokenIDs) {
			fix = fx["completions_token_ids"]
		}
		writeFixture(w, fix)
	}
}

// waitLocked waits, with f.mu held on entry and on a true return, while
// blocked holds, waking on every scheduler change; false (f.mu released)
// when ctx ends first.
func (f *Fake) waitLocked(ctx context.Context, blocked func() bool) bool {
	for blocked() {
		ch := f.sg.changed
		f.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
		f.mu.Lock()
	}
	return true
}
