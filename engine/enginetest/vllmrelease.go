package enginetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"slices"
	"strconv"
	"sync"

	"github.com/asyncrl/asyncrl/engine/driver"
)

// ReleaseSource cites one upstream fact a release profile rests on.
type ReleaseSource struct {
	Repo   string `json:"repo"`
	Path   string `json:"path"`
	Commit string `json:"commit"`
	Fact   string `json:"fact"`
}

// VLLMRelease is what one vLLM release does with the routes and fields
// asyncrl sends (testdata/vllm_releases/<name>.json): which exist, which
// query parameters and body fields it reads (FastAPI and vLLM's
// OpenAIBaseModel drop the others without an error) and what it answers.
type VLLMRelease struct {
	Name    string          `json:"name"`
	Version string          `json:"version"`
	Sources []ReleaseSource `json:"sources"`
	Pause   struct {
		Exists bool     `json:"exists"`
		Query  []string `json:"query"`
		// Modes: mode=abort|wait|keep is read; without it the pause
		// aborts in-flight requests unless wait_for_inflight_requests.
		Modes bool `json:"modes"`
	} `json:"pause"`
	ResetPrefixCache struct {
		Query []string `json:"query"`
		// Response is the JSON answer; null: an empty 200.
		Response json.RawMessage `json:"response"`
	} `json:"reset_prefix_cache"`
	// ServerInfo is GET /server_info?config_format=json's answer.
	ServerInfo       json.RawMessage `json:"server_info"`
	CompletionFields []string        `json:"completion_fields"`
	// ChoiceRoutedExperts: a choice carries routed_experts (with
	// --enable-return-routed-experts).
	ChoiceRoutedExperts bool     `json:"choice_routed_experts"`
	LoRALoadFields      []string `json:"lora_load_fields"`
	Note                string   `json:"note"`
}

// VLLMReleaseNames are the release profiles, oldest first.
var VLLMReleaseNames = []string{"0.11", "0.14", "0.16", "main"}

// LoadVLLMRelease reads the profile of a release ("0.11", "0.14", "0.16",
// "main").
func LoadVLLMRelease(name string) (*VLLMRelease, error) {
	b, err := testdata.ReadFile(path.Join("testdata", "vllm_releases", name+".json"))
	if err != nil {
		return nil, fmt.Errorf("enginetest: no vLLM release profile %q: %w", name, err)
	}
	var r VLLMRelease
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("enginetest: vLLM release profile %s: %w", name, err)
	}
	return &r, nil
}

// MustVLLMRelease is LoadVLLMRelease that panics (the profiles are
// embedded).
func MustVLLMRelease(name string) *VLLMRelease {
	r, err := LoadVLLMRelease(name)
	if err != nil {
		panic(err)
	}
	return r
}

// ReleaseOptions shape a release fake: the Fake's options and the
// server's flags that /server_info reports.
type ReleaseOptions struct {
	FakeOptions
	// MaxLogprobs is --max-logprobs (0: vLLM's default 20; -1: no cap).
	MaxLogprobs int
	// LogprobsMode is --logprobs-mode ("": raw_logprobs, the default).
	LogprobsMode string
	// ReturnRoutedExperts is --enable-return-routed-experts.
	ReturnRoutedExperts bool
}

// ReleaseFake is a fake vLLM of one release: in front of a Fake (the
// fixtures' shapes), it answers GET /version and /server_info, answers 404
// for the routes the release lacks, drops the query parameters and body
// fields it does not read, refuses logprobs above max_logprobs and a
// second LoRA load under one name without load_inplace — and records what
// the release made of each pause and reset.
type ReleaseFake struct {
	*httptest.Server
	Release *VLLMRelease
	Inner   *Fake
	Opts    ReleaseOptions

	mu      sync.Mutex
	pauses  []driver.PauseMode
	resets  []bool
	dropped []string
	loras   map[string]bool
}

// NewVLLMReleaseFake starts a fake of release name.
func NewVLLMReleaseFake(name string, opts ReleaseOptions) *ReleaseFake {
	rel := MustVLLMRelease(name)
	if opts.MaxLogprobs == 0 {
		opts.MaxLogprobs = 20
	}
	if opts.LogprobsMode == "" {
		opts.LogprobsMode = "raw_logprobs"
	}
	f := &ReleaseFake{Release: rel, Inner: NewFake(driver.KindVLLM, opts.FakeOptions), Opts: opts, loras: map[string]bool{}}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	return f
}

// Close stops both servers.
func (f *ReleaseFake) Close() {
	f.Server.Close()
	f.Inner.Close()
}

// Pauses are the modes the release applied to each /pause it served.
func (f *ReleaseFake) Pauses() []driver.PauseMode {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.pauses)
}

// Resets say, per /reset_prefix_cache served, whether it reset running
// requests too.
func (f *ReleaseFake) Resets() []bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.resets)
}

// Dropped lists what the release ignored, as "ROUTE param" entries.
func (f *ReleaseFake) Dropped() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.dropped)
}

var pauseRoutes = map[string]bool{"/pause": true, "/resume": true, "/is_paused": true}

func (f *ReleaseFake) serve(w http.ResponseWriter, r *http.Request) {
	if f.answer(w, r) {
		return
	}
	f.Inner.Config.Handler.ServeHTTP(w, r)
}

// answer answers what the release answers itself (true), or adjusts the
// request the inner engine then serves (false).
func (f *ReleaseFake) answer(w http.ResponseWriter, r *http.Request) bool {
	p := r.URL.Path
	switch {
	case p == "/version" && r.Method == http.MethodGet:
		writeJSON(w, map[string]string{"version": f.Release.Version})
		return true
	case p == "/server_info" && r.Method == http.MethodGet:
		if !f.Opts.DevMode {
			f.notFound(w)
			return true
		}
		writeJSON(w, f.serverInfo())
		return true
	case pauseRoutes[p] && !f.Release.Pause.Exists:
		f.notFound(w)
		return true
	case p == "/pause" && f.Opts.DevMode:
		r.URL.RawQuery = f.keepQuery(p, r.URL.Query(), f.Release.Pause.Query)
		return !f.pause(w, r.URL.Query())
	case p == "/reset_prefix_cache" && f.Opts.DevMode:
		return f.resetPrefixCache(w, r)
	case p == "/v1/completions" && r.Method == http.MethodPost:
		return f.completions(w, r)
	case p == "/v1/load_lora_adapter" && r.Method == http.MethodPost && f.Opts.LoRA:
		return f.loadLoRA(w, r)
	}
	return false
}

// resetPrefixCache records the reset and answers the release's own
// response when it has one.
func (f *ReleaseFake) resetPrefixCache(w http.ResponseWriter, r *http.Request) bool {
	p := r.URL.Path
	r.URL.RawQuery = f.keepQuery(p, r.URL.Query(), f.Release.ResetPrefixCache.Query)
	running, _ := strconv.ParseBool(r.URL.Query().Get("reset_running_requests"))
	f.mu.Lock()
	f.resets = append(f.resets, running)
	f.mu.Unlock()
	if len(f.Release.ResetPrefixCache.Response) > 0 && string(f.Release.ResetPrefixCache.Response) != "null" {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(f.Release.ResetPrefixCache.Response)
		return true
	}
	return false
}

// completions keeps the fields the release reads and refuses more sample
// logprobs than it allows.
func (f *ReleaseFake) completions(w http.ResponseWriter, r *http.Request) bool {
	body, ok := f.keepFields(w, r, r.URL.Path, f.Release.CompletionFields)
	if !ok {
		return true
	}
	if n, _ := body["logprobs"].(float64); f.Opts.MaxLogprobs != -1 && int(n) > f.Opts.MaxLogprobs {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		writeJSON(w, map[string]any{"error": map[string]any{
			"message": fmt.Sprintf("Requested sample logprobs of %d, which is greater than max allowed: %d", int(n), f.Opts.MaxLogprobs),
			"type":    "BadRequestError", "param": "logprobs", "code": 400}})
		return true
	}
	return false
}

// loadLoRA keeps the fields the release reads and refuses loading a name
// twice unless in place.
func (f *ReleaseFake) loadLoRA(w http.ResponseWriter, r *http.Request) bool {
	body, ok := f.keepFields(w, r, r.URL.Path, f.Release.LoRALoadFields)
	if !ok {
		return true
	}
	name, _ := body["lora_name"].(string)
	inplace, _ := body["load_inplace"].(bool)
	f.mu.Lock()
	again := f.loras[name]
	f.loras[name] = true
	f.mu.Unlock()
	if again && !inplace {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		writeJSON(w, map[string]any{"error": map[string]any{
			"message": fmt.Sprintf("The lora adapter '%s' has already been loaded.", name),
			"type":    "InvalidUserInput", "param": nil, "code": 400}})
		return true
	}
	return false
}

func (f *ReleaseFake) notFound(w http.ResponseWriter) {
	writeFixture(w, MustFixtures(driver.KindVLLM)["not_found"])
}

// pause records the mode the release applies; false after answering an
// invalid mode (vLLM's PauseMode literal: 422 from FastAPI).
func (f *ReleaseFake) pause(w http.ResponseWriter, q url.Values) bool {
	mode := driver.PauseAbort
	if f.Release.Pause.Modes {
		if m := q.Get("mode"); m != "" {
			mode = driver.PauseMode(m)
		}
		switch mode {
		case driver.PauseAbort, driver.PauseWait, driver.PauseKeep:
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnprocessableEntity)
			writeJSON(w, map[string]any{"detail": []map[string]any{{"loc": []string{"query", "mode"}, "msg": "Input should be 'abort', 'wait' or 'keep'"}}})
			return false
		}
	}
	if wait, _ := strconv.ParseBool(q.Get("wait_for_inflight_requests")); wait && mode == driver.PauseAbort {
		mode = driver.PauseWait
	}
	f.mu.Lock()
	f.pauses = append(f.pauses, mode)
	f.mu.Unlock()
	return true
}

// keepQuery drops the parameters the release does not read, recording
// them.
func (f *ReleaseFake) keepQuery(route string, q url.Values, known []string) string {
	f.dropUnknown(route, known, slices.Collect(maps.Keys(q)), q.Del)
	return q.Encode()
}

// keepFields drops the body fields the release does not read, recording
// them, and puts the rest back as the request body; false after
// answering a body that is not a JSON object.
func (f *ReleaseFake) keepFields(w http.ResponseWriter, r *http.Request, route string, known []string) (map[string]any, bool) {
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		writeJSON(w, map[string]any{"error": map[string]any{"message": "malformed JSON body", "type": "BadRequestError", "code": 400}})
		return nil, false
	}
	f.dropUnknown(route, known, slices.Collect(maps.Keys(body)), func(k string) { delete(body, k) })
	kept, _ := json.Marshal(body)
	r.Body = io.NopCloser(bytes.NewReader(kept))
	r.ContentLength = int64(len(kept))
	return body, true
}

// dropUnknown records and deletes (del) every key not in known, in
// sorted order.
func (f *ReleaseFake) dropUnknown(route string, known, keys []string, del func(string)) {
	slices.Sort(keys)
	for _, k := range keys {
		if !slices.Contains(known, k) {
			f.drop(route + " " + k)
			del(k)
		}
	}
}

func (f *ReleaseFake) drop(what string) {
	f.mu.Lock()
	f.dropped = append(f.dropped, what)
	f.mu.Unlock()
}

// serverInfo is the profile's /server_info with the options' flags.
func (f *ReleaseFake) serverInfo() map[string]any {
	var si map[string]any
	if err := json.Unmarshal(f.Release.ServerInfo, &si); err != nil {
		panic(fmt.Sprintf("enginetest: vLLM release profile %s: server_info: %v", f.Release.Name, err))
	}
	mc := si["vllm_config"].(map[string]any)["model_config"].(map[string]any)
	mc["max_logprobs"] = f.Opts.MaxLogprobs
	mc["logprobs_mode"] = f.Opts.LogprobsMode
	if _, ok := mc["enable_return_routed_experts"]; ok || f.Opts.ReturnRoutedExperts {
		mc["enable_return_routed_experts"] = f.Opts.ReturnRoutedExperts
	}
	return si
}
