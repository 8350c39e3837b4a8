// Package rollout is the rollout actor and its episode runner.
//
// # Contract
//
//   - An Actor joins queue group "rollout" on the prompts subject; each
//     PromptAssigned becomes a group of NSamples episodes (trajectory ids
//     GroupID/0 … GroupID/n−1), run under the actor's concurrency limit.
//   - RunEpisode plays one episode of a tasks.Task through a Generator:
//     every turn sends the whole conversation so far as token ids (BOS,
//     prompt, earlier turns, environment observations) with X-Session-ID =
//     the trajectory id, so the router keeps the trajectory on one engine.
//     Model tokens get loss mask 1, the engine's logprob, the version of the
//     weights that produced them, their sample support set and their
//     logprob renormalised over that set; context tokens get loss mask 0.
//   - Chat episodes (EpisodeConfig.Chat, rollout.chat_template): the
//     first observation becomes the model's chat-template prompt (system
//     prompt, user message, generation prompt) and every later one the
//     tokens the template puts after the model's turn (what the model did
//     not generate itself, e.g. the "\n" after <|im_end|>) plus the next
//     user message and generation prompt (Chat.Continue). The history is
//     never re-tokenised: the model's tokens stay exactly as sampled and
//     only they have loss mask 1 (model/chattemplate.Conversation).
//   - Wire (HTTPClient): vLLM's token-in/token-out form of /v1/completions:
//     prompt as token ids, return_token_ids, logprobs: 0,
//     return_tokens_as_token_ids, model/stop/stop_token_ids from the
//     client's fields. Tokens come from choices[0].token_ids; logprobs
//     from the engine's output_logprobs when present, else vLLM's
//     logprobs.token_logprobs (a null entry is an error naming its index);
//     versions from the engine's token_weight_versions when present, else
//     the router's X-Asyncrl-Weight-Version-Min for every token (a call
//     that straddled a weight swap counts from the older version), and an
//     answer with neither is an error; sample_support and
//     output_support_logprobs only from the built-in engine. Any per-token
//     array of the wrong length, or prompt_token_ids differing from the
//     prompt sent, fails the call (ErrEngine).
//     With Protocol ProtocolSGLang (every engine of the run is SGLang) the
//     turn goes to SGLang's native /generate instead (sglang.go): input_ids
//     in; output_ids, meta_info.output_token_logprobs (ids checked against
//     output_ids), finish_reason.type and prompt_tokens (checked against
//     the prompt) out; versions from the router's header. Routes and
//     support_from_logprobs are refused there.
//     With EpisodeConfig.SupportLogprobs (trainer.normalize_over_support)
//     the packed trajectory's logprobs are the support-normalised ones,
//     and an answer with support sets but without them is a failed call.
//     POST /finish_session releases the session at the end, whatever
//     happened.
//   - Replay data (issue 19, messages/vllmwire): with EpisodeConfig.Routes
//     (rollout.routed_experts) every call sends return_routed_experts and
//     routed_experts_prompt_start = the rows the trajectory holds; the
//     client decodes vLLM's base64 .npy rows once and the episode appends
//     them, so its routes are the concatenation of its calls' rows; the
//     positions no call routed (the last token, a trailing observation)
//     get arange(top_k) padding rows, which feed no trained token. With
//     HTTPClient.SupportFromLogprobs (rollout.support_from_logprobs) the
//     client rebuilds support sets from vLLM's top logprob rows when the
//     answer has no sample_support. Both are packed into the token batch's
//     routed_experts / sample_support columns.
//   - Failures: a failed call (transport error, non-200, timeout) is
//     retried with the accumulated tokens up to TurnAttempts times per
//     turn, RetryBackoff apart — the router sends the retry to a healthy
//     engine. A call that ended "abort" after producing tokens (abort-mode
//     weight update, engine shut down) is continued from them. A turn that
//     still cannot complete aborts the episode.
//   - Nothing is lost silently: a group whose episodes all finished is
//     packed into one Arrow TokenBatch inside a GroupReady (Rewards,
//     OldestVersion = the oldest model token's version, TrainedTokens per
//     trajectory, the batch's size and xxh3 checksum) and stored in the
//     trajectory buffer — the one copy of its token data: the control
//     messages after it carry a reference to that stored message and the
//     trainer fetches it (issue 31); otherwise one
//     EpisodeAborted per trajectory goes to the controller, which requeues
//     the prompt. The group's fate (complete, aborted, the reports) is the
//     pure core actors/rollout/outcome's, which the simulator steps too;
//     the actor runs, packs, stores and sends. Stop cancels running episodes and reports them aborted
//     (reason shutdown). Stats satisfies Started = Finished + Aborted once
//     Stop returned.
//   - PromptAssigned carries no seed, so the seed travels in the prompt id
//     (PromptID/ParsePromptID: "<base>~<seed>").
package rollout
