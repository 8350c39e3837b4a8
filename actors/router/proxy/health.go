package proxy

import (
	"context"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/asyncrl/asyncrl/engine/driver"
)

// loop runs f every interval until ctx ends.
func (r *Router) loop(ctx context.Context, interval time.Duration, f func(context.Context)) {
	defer r.wg.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f(ctx)
		}
	}
}

func (r *Router) urls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	vs := r.core.Replicas()
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.URL
	}
	return out
}

// forEach runs f for every replica concurrently and waits.
func (r *Router) forEach(f func(url string)) {
	var wg sync.WaitGroup
	for _, u := range r.urls() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(u)
		}()
	}
	wg.Wait()
}

// checkHealth probes every replica with engine/driver's ProbeHealth:
// GET /health, and for an SGLang replica whose /health (a generation) does
// not answer in time — always the case while it is paused for a weight
// swap — its scheduler-free /get_model_info.
func (r *Router) checkHealth(ctx context.Context) {
	r.forEach(func(u string) {
		cctx, cancel := context.WithTimeout(ctx, r.cfg.HealthTimeout)
		defer cancel()
		ok, err := driver.ProbeHealth(cctx, r.tr, u)
		if localResourceError(err) || inProcessTimeout(err) {
			return // this process is out of sockets or busy: says nothing about u
		}
		if ctx.Err() != nil {
			return // shutting down: a cancelled probe says nothing
		}
		r.observeHealth(u, ok, true)
	})
}

// observeHealth feeds one health signal to the core and logs transitions.
func (r *Router) observeHealth(u string, ok, probe bool) {
	r.mu.Lock()
	changed, err := r.core.ObserveHealth(u, ok, probe)
	r.mu.Unlock()
	switch {
	case err != nil || !changed:
	case ok:
		r.log.Info().Str("replica", u).Msg("replica healthy again")
	default:
		r.log.Warn().Str("replica", u).Msg("replica marked unhealthy")
	}
}

// passiveFailure counts a failed proxied request like a failed probe. Only
// with active checks on, since only they can bring the replica back.
func (r *Router) passiveFailure(u string) {
	if r.cfg.HealthInterval > 0 {
		r.observeHealth(u, false, false)
	}
}

// scrapeMetrics reads the engine's queue length and KV usage from GET
// /metrics of every replica.
func (r *Router) scrapeMetrics(ctx context.Context) {
	r.forEach(func(u string) {
		cctx, cancel := context.WithTimeout(ctx, max(r.cfg.MetricsInterval, 100*time.Millisecond))
		defer cancel()
		req, err := http.NewRequestWithContext(cctx, http.MethodGet, u+"/metrics", nil)
		if err != nil {
			return
		}
		resp, err := r.tr.RoundTrip(req)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return
		}
		queue, kv, ok := parseEngineMetrics(io.LimitReader(resp.Body, 4<<20))
		if !ok {
			return
		}
		r.mu.Lock()
		_ = r.core.ObserveMetrics(time.Now(), u, queue, kv)
		r.mu.Unlock()
	})
}

// parseEngineMetrics reads the waiting-queue length (summed over label
// sets, e.g. per model or DP rank) and the KV-cache usage (the fullest
// series: the binding one) of a vLLM, built-in or SGLang engine through
// engine/driver's parser (vllm:num_requests_waiting and
// vllm:kv_cache_usage_perc, or sglang:num_queue_reqs and
// sglang:token_usage); ok is false when the text holds none of them or
// does not parse.
func parseEngineMetrics(rd io.Reader) (queue int, kv float64, ok bool) {
	data, err := io.ReadAll(rd)
	if err != nil {
		return 0, 0, false
	}
	m, err := driver.ParseMetrics(data)
	if err != nil || !m.HasLoad {
		return 0, 0, false
	}
	return int(m.Waiting), m.KVCacheUsage, true
}
