package engine

import (
	"net/http"

	"github.com/asyncrl/asyncrl/internal/buildinfo"
)

// handleVersion answers GET /version as vLLM does ({"version": ...},
// vllm/entrypoints/serve/instrumentator/basic.py) with asyncrl's release,
// plus "engine": "asyncrl" so a driver can tell it from vLLM. The driver
// derives the built-in engine's capabilities from it (every feature of
// engine/driver's VLLMFeatures table, whatever the release).
func (e *Engine) handleVersion(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"version": buildinfo.Version, "engine": "asyncrl"})
}

// handleServerInfo answers GET /server_info in the shape of vLLM's dev-mode
// route with config_format=json (vllm/entrypoints/serve/instrumentator/
// server_info.py: {"vllm_config": {"model_config": {...}}, ...}), holding
// the model_config fields a run's checks read:
//   - max_logprobs: the served model's vocabulary (completions accept
//     logprobs up to it);
//   - logprobs_mode: processed_logprobs (logprobs are the sampled
//     distribution's: a candidate the filters removed reads -9999);
//   - enable_return_routed_experts: whether the served model reports MoE
//     routes (RoutesModel);
//   - enable_sleep_mode: true (POST /sleep is always served).
//
// config_format=text is not distinguished: the fields are the same.
func (e *Engine) handleServerInfo(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	m := e.model
	e.mu.Unlock()
	mc := map[string]any{
		"max_logprobs":                 0,
		"logprobs_mode":                "processed_logprobs",
		"enable_return_routed_experts": false,
		"enable_sleep_mode":            true,
	}
	if m != nil {
		mc["max_logprobs"] = m.VocabSize()
		_, routes := m.(RoutesModel)
		mc["enable_return_routed_experts"] = routes
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"vllm_config": map[string]any{"model_config": mc},
		"engine":      "asyncrl",
	})
}
