// Package engine is asyncrl's built-in inference engine: it serves a Model
// over vLLM's HTTP API so that the rollout and router code that drives real
// vLLM servers drives it unchanged, and it models a GPU server's latency so
// routing decisions have real consequences on one CPU machine.
//
// # Contract
//
// New(cfg, model, opts...) builds an engine and starts its batching loop;
// Handler() is the HTTP API, Serve/ListenAndServe bind it (127.0.0.1:8000
// by default), Shutdown aborts in-flight requests, stops the servers and
// the loop. SetModel(m, version) installs weights in-process; LoadWeights
// and /update_weights load a checkpoint through the ModelLoader given with
// WithLoader. Versions never decrease (ErrVersionDecrease, HTTP 409). A nil
// model is allowed: /health answers 503 and completions 503 until weights
// arrive. Each engine has its own prometheus.Registry (WithRegistry to
// share one), so several engines can run in one process.
//
// # HTTP surface (shapes as in /work/shared/reference/vllm-api.md)
//
//   - POST /v1/completions: prompt as a string, list of strings, token ids
//     or list of token-id lists; max_tokens (default 16), temperature,
//     top_p, top_k (-1 or 0 = off), min_p, seed, n, stop (string or list),
//     logprobs k, stream (SSE, ends with "data: [DONE]"),
//     stream_options.include_usage, ignore_eos, return_token_ids
//     (prompt_token_ids and token_ids on the choice),
//     return_tokens_as_token_ids (logprob tokens and top_logprobs keys
//     "token_id:N"), request_id. logprobs: 0 gives the sampled token's
//     logprob in logprobs.token_logprobs. return_routed_experts (a model
//     implementing RoutesModel; non-streamed) adds each choice's
//     routed_experts in vLLM's form (base64 .npy [prompt + generated − 1 −
//     routed_experts_prompt_start, layers, top_k], messages/vllmwire),
//     captured step by step with the weights of each step.
//     Text prompts get BOS prepended (Config.AddBOS); token ids are used
//     verbatim. Choices are prompt-major: index = prompt·n + k.
//   - Text side: the character tokenizer, or with WithTokenizer a Hugging
//     Face tokenizer directory (text.go, chathf.go): prompts encoded with
//     it (its BOS when it adds one and Config.AddBOS is on), output decoded
//     with special tokens skipped and incomplete characters held back while
//     streaming, its EOS ids ending generation, stop strings found anywhere
//     in the last token's text, logprob tokens named by their text.
//   - POST /v1/chat/completions: messages rendered by the template
//     "<|role|>content" per message followed by "<|assistant|>" (plain
//     text: the character tokenizer has no special chat tokens), or with
//     WithTokenizer by the tokenizer's chat template (tools,
//     add_generation_prompt (default true), chat_template_kwargs; string
//     tool-call arguments parsed, text parts joined with "\n", as vLLM); logprobs
//     true + top_logprobs k; max_tokens or max_completion_tokens (default:
//     the rest of the context). return_routed_experts and
//     routed_experts_prompt_start as in completions (rows from the first
//     token of the rendered prompt; vLLM's chat choice has the same
//     routed_experts).
//   - GET /v1/models, GET /health, GET /metrics.
//   - GET /version → {"version": asyncrl's release, "engine": "asyncrl"};
//     GET /server_info → vLLM's {"vllm_config": {"model_config": {...}}}
//     with max_logprobs, logprobs_mode, enable_return_routed_experts
//     (serverinfo.go): what engine/driver's capability probe reads.
//   - RL control: POST /pause?mode=keep|abort|wait&clear_cache=bool with
//     vLLM's defaults (mode=abort, clear_cache=true, clear_cache ignored
//     with keep) → {"status":"paused"}; POST /resume → {"status":"resumed"};
//     GET /is_paused, POST /abort_requests {"request_ids"}
//     (empty = all; ids are the request_id field, the X-Request-Id header,
//     or the generated response id), POST /reset_prefix_cache.
//   - Weights: /init_weight_transfer_engine, /start_weight_update and
//     /finish_weight_update are accepted (no transfer group is needed
//     in-process); POST /update_weights {"checkpoint_dir","version"} loads
//     through the loader; GET /get_world_size → {"world_size": 1}.
//     POST /v1/load_lora_adapter {"lora_name","lora_path","load_inplace"}
//     (a loaded name needs load_inplace: true, else 400; plain-text 200 as
//     in vLLM) serves the loaded
//     model as `model: lora_name` (its prefix-cache keys are salted by the
//     name); /v1/unload_lora_adapter aborts its live requests. A lora_path
//     holding adapter_config.json is a PEFT adapter: the AdapterLoader
//     (WithAdapterLoader, adapter.go) reads it and it is applied onto the
//     served model, and again onto each model a later weight update
//     serves (one that refuses it unloads it); any other path is a whole
//     model loaded with the loader. Requests for the base are unaffected.
//     POST /sleep?level=1|2&mode=abort|keep (defaults 1, abort; empty 200),
//     POST /wake_up (empty 200), GET /is_sleeping.
//   - POST /collective_rpc {"method","args","kwargs","timeout"} →
//     {"results":[...]} (one worker) for the methods of asyncrl's vLLM
//     worker extension (integrations/vllm), answering as it does: loads
//     {"version": v}, the version query "v" (vLLM stringifies ints):
//     asyncrl_load_checkpoint(dir, version) loads through the loader;
//     asyncrl_apply_delta(dir, version) patches a copy of the served
//     checkpoint (WithWorkDir) with the SkyRL delta in dir (manifest
//     version = version, base_version = the served version, else 409; the
//     served version again is a no-op) and
//     loads it; asyncrl_loaded_version() reports the served version. An
//     unknown method answers 500 with "... has no attribute '<method>'"
//     as vLLM's workers do.
//   - Errors use vLLM's envelope {"error":{"message","type","param","code"}}:
//     400 malformed JSON or bad fields (max_tokens < 1, prompt + max_tokens
//     over max_model_len, top_p ∉ (0,1], temperature < 0, top_k < -1,
//     min_p ∉ [0,1], n < 1, bad token ids), 404 unknown model or adapter,
//     409 version decrease, 429 waiting queue full, 503 no weights.
//     A full KV cache is never an error: requests queue or are preempted.
//
// # Pause semantics
//
//   - keep: the loop freezes; queued and running sequences keep their state
//     and continue after resume. Tokens computed after resume use the
//     weights installed then, so one request's token_weight_versions can
//     show two versions.
//   - abort: in-flight sequences end now with their partial output and
//     finish_reason "abort"; the engine stays paused.
//   - wait: in-flight sequences (running or queued) finish; /pause returns
//     when they have. In every mode, requests arriving while paused (or
//     sleeping) are held and queued on resume in arrival order; they count
//     against max_waiting.
//
// # asyncrl extensions on every choice (and streamed chunk choice)
//
//   - weight_version: the version that produced the choice's last token.
//   - token_weight_versions: one version per generated token.
//   - output_logprobs: log_softmax(logits/T)[token] of every generated token
//     under the weights that produced it (T = 1 for greedy), always present.
//     The logprobs objects report the same values.
//   - sample_support: per token, the candidate ids that survived top-k /
//     top-p / min-p (descending probability, the sampled id always among
//     them); present iff top_p < 1, top_k > 0 or min_p > 0.
//   - output_support_logprobs: with sample_support, per token the logprob
//     renormalised over that token's support set at temperature T —
//     sampler.SupportLogProb(logits, T, support, token) on the very logits
//     that sampled it (T = 1 for greedy). A trainer with
//     normalize_over_support uses it as the rollout logprob and normalises
//     its own logprob over the same set, so both sides of the ratio are
//     distributions over the same candidates. Absent when no filter is
//     active (the support is then the whole vocabulary and the value would
//     equal output_logprobs).
//   - Response header X-Weight-Version: the newest version among the
//     response's last tokens (streams: the version serving at the start).
//
// Stop strings are removed from text but their tokens stay in token_ids
// and logprobs (the trainer needs what was sampled); streams hold back a
// tail that may still become a stop string. EOS ends a sequence with
// "stop" unless ignore_eos; it stays in token_ids and renders as "</s>" in
// logprobs and as nothing in text.
//
// # Latency model
//
// The loop is a shell around latency.Scheduler (see that package for the
// equations): each step it asks the core which sequences run, sleeps the
// step's modelled duration × Config.TimeScale (minus the real time the
// previous step's compute took), then computes one real token per running
// sequence with the Model. With the defaults (latency.DefaultConfig):
//
//	step = 10 ms + 50 µs·batch + 40 µs·uncached_prompt_tokens
//	TTFT = queueing + step of admission;  block_size 16, 8192 blocks,
//	max_num_seqs 256, max_waiting 4096, max_model_len 2048.
//
// vllm:time_to_first_token_seconds and vllm:e2e_request_latency_seconds
// observe MODELLED seconds (independent of TimeScale and of the host's
// speed), so a simulation on a slow laptop reports what the modelled GPU
// would. Counters follow vLLM: prefix-cache queries/hits in prompt tokens
// at admission, kv_cache_usage_perc = referenced blocks / capacity,
// num_requests_waiting includes requests held by a pause.
//
// # Batched models (batch.go)
//
// A Model that implements BatchModel (model/transformer's) keeps a real
// KV cache per sequence: each step the engine runs one Forward per model
// (the base model, each LoRA) over all of that model's sequences — the
// prompt on a sequence's first step, then its last token — and samples
// from the logits as for any Model. A sequence's cache belongs to the
// model that built it; after a weight swap the engine drops it and
// prefills the sequence again on the new model, so no token is computed
// over keys and values of other weights. Routes for return_routed_experts
// are read from the cache. The real caches are not bounded by the
// modelled block budget (they live as long as their sequences). An
// EOSModel's EOSIDs end generation instead of the character tokenizer's
// EOS.
package engine
