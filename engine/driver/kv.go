package driver

import (
	"context"
	"net/http"
	"net/url"
)

// ResetKV drops the prefix cache and the KV cache of every running or
// frozen request, so that every token computed after it attends only to
// KV the weights installed now computed. It is what a keep-mode weight
// swap needs before Resume: vLLM's POST /reset_prefix_cache alone refuses
// (quietly: the route answers 200 either way) while running requests hold
// blocks, and with reset_running_requests=true it first preempts every
// running request back to the waiting queue with no computed tokens, so
// each is recomputed from its prompt and output on the new weights
// (vllm/entrypoints/serve/cache/api_router.py@09cb327f1183534adbdf9eee3e438688e75fbe2b,
// the query parameter; vllm/v1/core/sched/scheduler.py@00024d314514900f361ad072af6931e403b7f589,
// Scheduler.reset_prefix_cache: "If reset_running_requests is True, all the
// running requests will be preempted and moved to the waiting queue.
// Otherwise, this method will only reset the KV prefix cache when there is
// no running requests taking KV cache."). Releases that predate the
// parameter drop it silently, so the swap must know the release has it:
// FeatureResetRunning in the capability table.
//
// The built-in engine answers the same route; it recomputes every
// sequence's KV after a weight swap anyway (engine.BatchModel).
func (d *vllmDriver) ResetKV(ctx context.Context) error {
	_, err := d.do(ctx, http.MethodPost, "/reset_prefix_cache", url.Values{"reset_running_requests": {"true"}}, nil, false)
	return err
}

// ResetKV is not possible on SGLang with requests running: its scheduler
// flushes only an idle engine (POST /flush_cache answers 400 otherwise,
// and a flush_cache weight update with requests in the running batch
// trips its "Cache flush failed" assertion), so a keep-mode (in_place)
// swap there cannot drop the frozen requests' KV.
func (d *sglangDriver) ResetKV(ctx context.Context) error {
	return &UnsupportedError{Engine: d.url, Kind: KindSGLang, Op: "dropping running requests' KV",
		Hint: "SGLang flushes its cache only when idle: swap with trainer.pause_mode abort, or accept that frozen requests continue on KV from the older weights (their tokens are stamped with the version they started on)"}
}

// FeatureResetRunning: POST /reset_prefix_cache takes
// reset_running_requests (preempt running requests so the reset succeeds).
const FeatureResetRunning Feature = "reset_running_requests"
