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
//     weights that produced them (token_weight_versions), their sample
//     support set and their logprob renormalised over that set (the
//     engine's output_support_logprobs); context tokens get loss mask 0.
//     With EpisodeConfig.SupportLogprobs (trainer.normalize_over_support)
//     the packed trajectory's logprobs are the support-normalised ones,
//     and an answer with support sets but without them is a failed call.
//     POST /finish_session releases the session at the end, whatever
//     happened.
//   - Failures: a failed call (transport error, non-200, timeout) is
//     retried with the accumulated tokens up to TurnAttempts times per
//     turn, RetryBackoff apart — the router sends the retry to a healthy
//     engine. A call that ended "abort" after producing tokens (abort-mode
//     weight update, engine shut down) is continued from them. A turn that
//     still cannot complete aborts the episode.
//   - Nothing is lost silently: a group whose episodes all finished is
//     packed into one Arrow TokenBatch inside a GroupReady (Rewards,
//     OldestVersion = the oldest model token's version); otherwise one
//     EpisodeAborted per trajectory goes to the controller, which requeues
//     the prompt. Stop cancels running episodes and reports them aborted
//     (reason shutdown). Stats satisfies Started = Finished + Aborted once
//     Stop returned.
//   - PromptAssigned carries no seed, so the seed travels in the prompt id
//     (PromptID/ParsePromptID: "<base>~<seed>").
package rollout
