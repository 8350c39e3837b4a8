package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler returns the engine's HTTP API (see the package comment).
func (e *Engine) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", e.handleCompletions)
	mux.HandleFunc("POST /v1/chat/completions", e.handleChat)
	mux.HandleFunc("GET /v1/models", e.handleModels)
	mux.HandleFunc("GET /health", e.handleHealth)
	mux.HandleFunc("GET /version", e.handleVersion)
	mux.HandleFunc("GET /server_info", e.handleServerInfo)
	mux.Handle("GET /metrics", promhttp.HandlerFor(e.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("POST /pause", e.handlePause)
	mux.HandleFunc("POST /resume", func(w http.ResponseWriter, r *http.Request) {
		e.Resume()
		writeJSON(w, http.StatusOK, map[string]any{"status": "resumed"})
	})
	mux.HandleFunc("GET /is_paused", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]bool{"is_paused": e.IsPaused()})
	})
	mux.HandleFunc("POST /abort_requests", e.handleAbort)
	// reset_running_requests (vLLM: preempt running requests so the reset
	// succeeds) needs nothing more here: every sequence's KV is recomputed
	// on the weights installed after a swap (BatchModel), so the prefix
	// cache is the only KV a swap can leave behind.
	mux.HandleFunc("POST /reset_prefix_cache", func(w http.ResponseWriter, r *http.Request) {
		e.ResetPrefixCache()
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok"})
	})
	// Weight transfer: the built-in engine needs no transfer group, so
	// init/start/finish only track state; update_weights loads a checkpoint.
	mux.HandleFunc("POST /init_weight_transfer_engine", e.okHandler(nil))
	mux.HandleFunc("POST /start_weight_update", e.okHandler(func() { e.setUpdating(true) }))
	mux.HandleFunc("POST /finish_weight_update", e.okHandler(func() { e.setUpdating(false) }))
	mux.HandleFunc("POST /update_weights", e.handleUpdateWeights)
	mux.HandleFunc("GET /get_world_size", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]int{"world_size": 1})
	})
	mux.HandleFunc("POST /v1/load_lora_adapter", e.handleLoadLoRA)
	mux.HandleFunc("POST /v1/unload_lora_adapter", e.handleUnloadLoRA)
	mux.HandleFunc("POST /sleep", e.handleSleep)
	mux.HandleFunc("POST /wake_up", func(w http.ResponseWriter, r *http.Request) {
		e.WakeUp()
		w.WriteHeader(http.StatusOK) // vLLM answers an empty 200
	})
	mux.HandleFunc("POST /collective_rpc", e.handleCollectiveRPC)
	mux.HandleFunc("GET /is_sleeping", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]bool{"is_sleeping": e.IsSleeping()})
	})
	return e.authorize(mux)
}

func (e *Engine) setUpdating(v bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.updating = v
}

func (e *Engine) okHandler(f func()) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if f != nil {
			f()
		}
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok"})
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers with vLLM's error envelope.
func writeError(w http.ResponseWriter, status int, param, format string, args ...any) {
	typ := map[int]string{
		http.StatusBadRequest:          "BadRequestError",
		http.StatusNotFound:            "NotFoundError",
		http.StatusForbidden:           "PermissionDeniedError",
		http.StatusConflict:            "ConflictError",
		http.StatusTooManyRequests:     "RateLimitError",
		http.StatusServiceUnavailable:  "ServiceUnavailableError",
		http.StatusInternalServerError: "InternalServerError",
	}[status]
	d := ErrorDetail{Message: fmt.Sprintf(format, args...), Type: typ, Code: status}
	if param != "" {
		d.Param = &param
	}
	writeJSON(w, status, ErrorBody{Error: d})
}

// decodeBody decodes a JSON body; false after answering 400.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err == nil {
		err = json.Unmarshal(body, v)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "", "malformed JSON body: %v", err)
		return false
	}
	return true
}

func (e *Engine) handleModels(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	// perm is vLLM's ModelPermission (vllm/entrypoints/openai/protocol.py).
	type perm struct {
		ID                 string  `json:"id"`
		Object             string  `json:"object"`
		Created            int64   `json:"created"`
		AllowCreateEngine  bool    `json:"allow_create_engine"`
		AllowSampling      bool    `json:"allow_sampling"`
		AllowLogprobs      bool    `json:"allow_logprobs"`
		AllowSearchIndices bool    `json:"allow_search_indices"`
		AllowView          bool    `json:"allow_view"`
		AllowFineTuning    bool    `json:"allow_fine_tuning"`
		Organization       string  `json:"organization"`
		Group              *string `json:"group"`
		IsBlocking         bool    `json:"is_blocking"`
	}
	perms := []perm{{ID: "modelperm-asyncrl", Object: "model_permission", AllowSampling: true, AllowLogprobs: true, AllowView: true, Organization: "*"}}
	type card struct {
		ID          string  `json:"id"`
		Object      string  `json:"object"`
		Created     int64   `json:"created"`
		OwnedBy     string  `json:"owned_by"`
		Root        string  `json:"root"`
		Parent      *string `json:"parent"`
		MaxModelLen int     `json:"max_model_len"`
		Permission  []perm  `json:"permission"`
	}
	base := e.cfg.ServedModelName
	data := []card{{ID: base, Object: "model", OwnedBy: "asyncrl", Root: base, MaxModelLen: e.maxLen(e.model), Permission: perms}}
	for name := range e.loras {
		data = append(data, card{ID: name, Object: "model", OwnedBy: "asyncrl", Root: name, Parent: &base, MaxModelLen: e.maxLen(e.loras[name]), Permission: perms})
	}
	e.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

func (e *Engine) handleHealth(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	ok := e.model != nil && !e.closed
	e.mu.Unlock()
	if !ok {
		writeError(w, http.StatusServiceUnavailable, "", "no weights loaded")
		return
	}
	w.WriteHeader(http.StatusOK)
}

// handlePause answers POST /pause with vLLM's defaults: mode=abort,
// clear_cache=true, and clear_cache ignored in keep mode
// (vllm/entrypoints/serve/dev/rlhf/api_router.py). Go callers of Pause
// keep their own defaults ("" = keep).
func (e *Engine) handlePause(w http.ResponseWriter, r *http.Request) {
	mode := r.URL.Query().Get("mode")
	if mode == "" {
		mode = "abort"
	}
	clear := true
	if v := r.URL.Query().Get("clear_cache"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, "clear_cache", "clear_cache must be true or false, got %q", v)
			return
		}
		clear = b
	}
	if mode == "keep" {
		clear = false
	}
	if err := e.Pause(r.Context(), mode, clear); err != nil {
		if r.Context().Err() != nil {
			return // client gone
		}
		writeError(w, http.StatusBadRequest, "mode", "%v", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "paused"})
}

// handleSleep answers POST /sleep?level=1|2&mode=abort|keep as vLLM does
// (vllm/entrypoints/serve/dev/sleep/api_router.py): level defaults to 1,
// mode to abort (in-flight requests end now; with keep they freeze), and
// the answer is an empty 200. The built-in engine holds no GPU memory, so
// both levels freeze the engine and drop the prefix cache; the weights
// stay (vLLM's level 2 discards them and needs a reload after wake_up).
func (e *Engine) handleSleep(w http.ResponseWriter, r *http.Request) {
	level := r.URL.Query().Get("level")
	if level == "" {
		level = "1"
	}
	if level != "1" && level != "2" {
		writeError(w, http.StatusBadRequest, "level", "sleep level must be 1 or 2, got %q", level)
		return
	}
	mode := r.URL.Query().Get("mode")
	switch mode {
	case "", "abort":
		e.mu.Lock()
		e.abortLocked(nil, false)
		e.mu.Unlock()
	case "keep":
	default:
		writeError(w, http.StatusBadRequest, "mode", "sleep mode must be abort or keep, got %q", mode)
		return
	}
	e.Sleep()
	w.WriteHeader(http.StatusOK)
}

func (e *Engine) handleAbort(w http.ResponseWriter, r *http.Request) {
	var req AbortRequest
	if r.ContentLength != 0 && !decodeBody(w, r, &req) {
		return
	}
	n := e.Abort(req.RequestIDs)
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "aborted": n})
}

func (e *Engine) handleUpdateWeights(w http.ResponseWriter, r *http.Request) {
	var req UpdateWeightsRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if req.CheckpointDir == "" {
		writeError(w, http.StatusBadRequest, "checkpoint_dir", "the built-in engine loads weights from checkpoint_dir, which is empty")
		return
	}
	if err := e.LoadWeights(req.CheckpointDir, req.Version); err != nil {
		e.writeEngineError(w, err)
		return
	}
	w.Header().Set("X-Weight-Version", strconv.FormatInt(req.Version, 10))
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "weight_version": req.Version})
}

func (e *Engine) writeEngineError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, ErrVersionDecrease):
		writeError(w, http.StatusConflict, "version", "%v", err)
	case errors.Is(err, ErrNoLoader), errors.Is(err, ErrNoAdapterLoader):
		writeError(w, http.StatusNotImplemented, "", "%v", err)
	case errors.Is(err, ErrPathNotAllowed):
		writeError(w, http.StatusForbidden, "", "%v", err)
	case errors.Is(err, ErrClosed):
		writeError(w, http.StatusServiceUnavailable, "", "%v", err)
	default:
		writeError(w, http.StatusBadRequest, "", "%v", err)
	}
}

func (e *Engine) handleLoadLoRA(w http.ResponseWriter, r *http.Request) {
	var req LoRARequest
	if !decodeBody(w, r, &req) {
		return
	}
	if req.LoRAName == "" || req.LoRAPath == "" {
		writeError(w, http.StatusBadRequest, "lora_name", "lora_name and lora_path are required")
		return
	}
	if req.LoRAName == e.cfg.ServedModelName {
		writeError(w, http.StatusBadRequest, "lora_name", "lora_name %q is the base model's name", req.LoRAName)
		return
	}
	if !req.LoadInplace && e.hasLoRA(req.LoRAName) {
		writeError(w, http.StatusBadRequest, "lora_name", "The lora adapter '%s' has already been loaded. If you want to load the adapter in place, set 'load_inplace' to True.", req.LoRAName)
		return
	}
	if err := e.LoadLoRA(req.LoRAName, req.LoRAPath); err != nil {
		e.writeEngineError(w, err)
		return
	}
	// vLLM answers a plain-text 200 (vllm/entrypoints/serve/lora/api_router.py).
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "Success: LoRA adapter '%s' added successfully.", req.LoRAName)
}

func (e *Engine) hasLoRA(name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.loras[name]
	return ok
}

func (e *Engine) handleUnloadLoRA(w http.ResponseWriter, r *http.Request) {
	var req LoRARequest
	if !decodeBody(w, r, &req) {
		return
	}
	if !e.UnloadLoRA(req.LoRAName) {
		writeError(w, http.StatusNotFound, "lora_name", "LoRA adapter %q is not loaded", req.LoRAName)
		return
	}
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "Success: LoRA adapter '%s' removed successfully.", req.LoRAName)
}
