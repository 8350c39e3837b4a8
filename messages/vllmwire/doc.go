// Package vllmwire decodes and encodes vLLM's replay wire forms — the
// per-choice routed_experts of MoE models (R3, rollout routing replay) and
// the top logprob rows that sample support sets (top-k/top-p replay) are
// rebuilt from — so rollout packs them into messages.TokenBatch columns
// without per-token JSON past the HTTP client, and the built-in engine
// answers in the same form.
//
// # routed_experts
//
// vllm-project/vllm vllm/entrypoints/openai/completion/protocol.py,
// CompletionResponseChoice.routed_experts: a string, base64 of the .npy
// bytes of an array of shape (num_tokens − 1, num_layers,
// num_experts_per_tok), dtype uint8/uint16/int32 (np.load(io.BytesIO(
// base64.b64decode(s))) reads it). num_tokens counts the prompt from
// CompletionRequest.routed_experts_prompt_start ("skip the first N prompt
// tokens") plus the generated tokens; the last generated token has no row
// because it was never forwarded. So a turn whose prompt has P tokens, of
// which C already have rows, and which generates G tokens, answers
// P+G−1−C rows: those of positions C … P+G−2. A multi-turn client sends
// C = rows captured so far and appends what comes back; the episode's
// routes are the concatenation of its turns' rows.
//
// This differs from the {"data", "shape", "dtype"} object the project's
// reference notes described (Dynamo-style producers send it): the decoder
// accepts both, the encoder writes vLLM's string. SGLang's /generate sends
// base64 of the raw int32 bytes without a shape (DecodeSGLangRoutes).
//
// # Sample support
//
// vLLM reports no support set; with --logprobs-mode processed_logprobs
// (vllm/config/model.py LogprobsMode) and logprobs: N, each generated
// token's top_logprobs are taken after top-k/top-p filtering and a removed
// candidate shows as −9999.0 (the completions API's clamp of −inf). The
// candidates above that floor are the token's support (SupportSets); the
// sampled id always belongs to its set.
//
// Everything here is pure (stdlib and no I/O) and decoding never panics:
// errors wrap ErrMalformed, and decoded values are bounded by the input.
package vllmwire
