// Package guard is asyncrl's engine guard: a reverse proxy in front of one
// inference engine (vLLM, SGLang or the built-in engine) that requires
// "Authorization: Bearer <key>" on every route, because vLLM's --api-key
// does not. vLLM's AuthenticationMiddleware checks only path prefixes
// (/v1 in vllm/entrypoints/openai/server_utils.py, vllm-project/vllm@387dcddc;
// /v1, /v2, /inference, /cohere in
// vllm/entrypoints/serve/middleware/authenticate.py, vllm-project/vllm@baaf6e9c),
// so its control routes — /collective_rpc, /pause, /resume, /sleep,
// /wake_up, /reset_prefix_cache, /update_weights, /abort_requests,
// /server_info, … — answer anyone who reaches the port (docs/security.md,
// "Engine control routes").
//
// Contract:
//   - Every request needs the key (constant-time compare, internal/netx),
//     OPTIONS included; without it the answer is 401 {"error":"Unauthorized"}
//     (vLLM's own refusal shape) and nothing reaches the engine. The one
//     exception is GET or HEAD /health when Config.OpenHealth is set.
//   - Everything else is forwarded unchanged: method, path, query, body
//     (streamed, never buffered), headers except hop-by-hop ones; the
//     engine's status, headers and body come back unchanged, an event
//     stream or an answer without Content-Length flushed chunk by chunk.
//     Authorization is replaced by Config.UpstreamKey when set; otherwise the
//     caller's (the verified key) goes on, so an engine started with the
//     same --api-key accepts it. Host becomes the engine's (as the engine
//     is addressed); X-Forwarded-For/-Host/-Proto say what the guard saw.
//   - An engine that cannot be reached gets the caller a 502 JSON error; an
//     engine that fails mid-answer aborts the caller's connection (never a
//     silently truncated 200). The caller's disconnect cancels the engine
//     request.
//   - The guard holds no state beyond counters: several guards, or a
//     restart, change nothing.
//
// Metrics (Config.Registerer): asyncrl_engine_guard_requests_total,
// asyncrl_engine_guard_refused_total{reason}, and
// asyncrl_engine_guard_upstream_errors_total.
//
// The package is a library (no actors, cluster or config imports);
// `asyncrl engine-guard` (cmd/asyncrl/engineguard.go) serves it.
package guard
