package routerbench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/asyncrl/asyncrl/actors/router/policy"
	"github.com/asyncrl/asyncrl/actors/router/proxy"
)

// OverheadConfig configures the router overhead measurement: the same
// requests sent straight to a trivial backend and through the router to
// it, alternating, at each concurrency.
type OverheadConfig struct {
	// Clients are the closed-loop concurrency levels (each client sends
	// its next request as soon as the previous answer arrived).
	Clients []int
	// Duration is the measuring time of one (target, level) pair, after
	// Warmup.
	Duration, Warmup time.Duration
	// Policy is the router's policy; every client is one session.
	Policy string
	// Rate, when > 0, adds an open-loop test at that many requests/s,
	// sent by RateWorkers workers; latency counts from each request's
	// scheduled start, so queueing behind a slow target is included.
	Rate        float64
	RateWorkers int
}

// DefaultOverheadConfig measures 1, 16, 64 and 256 clients for 3 s each
// and 2,000 requests/s open loop, through bounded_sticky.
func DefaultOverheadConfig() OverheadConfig {
	return OverheadConfig{
		Clients:     []int{1, 16, 64, 256},
		Duration:    3 * time.Second,
		Warmup:      300 * time.Millisecond,
		Policy:      policy.BoundedSticky,
		Rate:        2000,
		RateWorkers: 128,
	}
}

// OverheadResult is one (target, load) measurement.
type OverheadResult struct {
	// Target is "direct" or "router".
	Target string
	// Clients is the closed-loop concurrency, or the open-loop workers.
	Clients int
	// Rate is the offered rate of an open-loop test (0 = closed loop).
	Rate float64
	// Requests completed while measuring, and their rate.
	Requests int
	RPS      float64
	// P50 and P99 request latency.
	P50, P99 time.Duration
	// Errors counts failed requests (not in the latencies).
	Errors int
	// InRouter50 and InRouter99 are quantiles of the router's own
	// asyncrl_router_overhead_seconds histogram (time inside the router,
	// excluding the upstream's answer); 0 for direct. Bucketed: factor-2
	// resolution.
	InRouter50, InRouter99 time.Duration
}

// backendResponse is a small vLLM-shaped completion, so the router relays
// a realistic (if short) body.
var backendResponse = []byte(`{"id":"cmpl-1","object":"text_completion","created":0,"model":"m","choices":[{"index":0,"text":"hello world","logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`)

// trivialBackend answers every request at once: the fastest backend the
// router could front, so all measured latency is HTTP plus routing.
func trivialBackend(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(backendResponse)))
	_, _ = w.Write(backendResponse)
}

// RunOverhead starts a trivial backend, then for each level measures
// direct and routed latency back to back (the order alternating between
// levels), and finally the open-loop rate test. Every routed measurement
// gets a fresh router, so its in-router overhead histogram covers exactly
// that measurement.
func RunOverhead(ctx context.Context, cfg OverheadConfig) ([]OverheadResult, error) {
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	backURL, back, err := serve(&wg, errs, http.HandlerFunc(trivialBackend))
	if err != nil {
		return nil, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = back.Shutdown(sctx)
		wg.Wait()
	}()
	maxC := cfg.RateWorkers
	for _, c := range cfg.Clients {
		maxC = max(maxC, c)
	}
	measure := func(target string, f func(base string) (OverheadResult, error)) (OverheadResult, error) {
		if target == "direct" {
			r, err := f(backURL)
			r.Target = target
			return r, err
		}
		reg := prometheus.NewRegistry()
		pc := proxy.DefaultConfig()
		pc.Policy.Policy = cfg.Policy
		pc.Replicas = []string{backURL}
		pc.Registerer = reg
		rt, err := proxy.New(pc)
		if err != nil {
			return OverheadResult{}, err
		}
		var rwg sync.WaitGroup
		routerURL, front, err := serve(&rwg, errs, rt.Handler())
		if err != nil {
			_ = rt.Shutdown(ctx)
			return OverheadResult{}, err
		}
		r, err := f(routerURL)
		r.Target = target
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = front.Shutdown(sctx)
		_ = rt.Shutdown(sctx)
		rwg.Wait()
		r.InRouter50, r.InRouter99 = routerOverhead(reg)
		return r, err
	}

	var out []OverheadResult
	for i, c := range cfg.Clients {
		order := []string{"direct", "router"}
		if i%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, target := range order {
			client := newClient(maxC)
			r, err := measure(target, func(base string) (OverheadResult, error) {
				return closedLoop(ctx, client, base, c, cfg.Warmup, cfg.Duration)
			})
			client.CloseIdleConnections()
			if err != nil {
				return out, err
			}
			out = append(out, r)
		}
	}
	if cfg.Rate > 0 {
		for _, target := range []string{"direct", "router"} {
			client := newClient(maxC)
			r, err := measure(target, func(base string) (OverheadResult, error) {
				return openLoop(ctx, client, base, cfg.Rate, cfg.RateWorkers, cfg.Warmup, cfg.Duration)
			})
			client.CloseIdleConnections()
			if err != nil {
				return out, err
			}
			out = append(out, r)
		}
	}
	select {
	case err := <-errs:
		return out, err
	default:
	}
	return out, nil
}

// routerOverhead reads p50 and p99 of asyncrl_router_overhead_seconds
// (time spent inside the router per request) from reg.
func routerOverhead(reg *prometheus.Registry) (p50, p99 time.Duration) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, 0
	}
	for _, mf := range mfs {
		if mf.GetName() != "asyncrl_router_overhead_seconds" || len(mf.GetMetric()) == 0 {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		bs := []bucket{{le: math.Inf(1), count: float64(h.GetSampleCount())}}
		for _, b := range h.GetBucket() {
			bs = append(bs, bucket{le: b.GetUpperBound(), count: float64(b.GetCumulativeCount())})
		}
		q := func(x float64) time.Duration { return time.Duration(histogramQuantile(x, bs) * 1e9) }
		return q(0.5), q(0.99)
	}
	return 0, 0
}

// smallRequest sends one short completion request as session sid.
func smallRequest(ctx context.Context, c *http.Client, base, sid string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions",
		bytes.NewReader([]byte(`{"model":"m","prompt":"hello","max_tokens":2}`)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(SessionHeader, sid)
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return err
}

// recorder collects latencies from concurrent workers.
type recorder struct {
	mu     sync.Mutex
	lat    []float64 // seconds
	errors int
}

func (r *recorder) add(lat []float64, errs int) {
	r.mu.Lock()
	r.lat = append(r.lat, lat...)
	r.errors += errs
	r.mu.Unlock()
}

func (r *recorder) result(clients int, rate float64, d time.Duration) OverheadResult {
	res := OverheadResult{Clients: clients, Rate: rate, Requests: len(r.lat), Errors: r.errors,
		RPS: float64(len(r.lat)) / d.Seconds()}
	res.P50 = time.Duration(percentile(r.lat, 0.5) * 1e9)
	res.P99 = time.Duration(percentile(r.lat, 0.99) * 1e9)
	return res
}

// closedLoop runs n clients back to back for warmup+d and keeps the
// latencies of requests that started after the warm-up.
func closedLoop(ctx context.Context, c *http.Client, base string, n int, warmup, d time.Duration) (OverheadResult, error) {
	start := time.Now()
	measureFrom, end := start.Add(warmup), start.Add(warmup+d)
	var (
		rec recorder
		wg  sync.WaitGroup
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sid := "client-" + strconv.Itoa(i)
			lat := make([]float64, 0, 1024)
			errs := 0
			for ctx.Err() == nil {
				t0 := time.Now()
				if !t0.Before(end) {
					break
				}
				err := smallRequest(ctx, c, base, sid)
				if t0.Before(measureFrom) {
					continue
				}
				if err != nil {
					errs++
					continue
				}
				lat = append(lat, time.Since(t0).Seconds())
			}
			rec.add(lat, errs)
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return OverheadResult{}, err
	}
	return rec.result(n, 0, d), nil
}

// openLoop offers rate requests/s for warmup+d from workers goroutines.
// Each request has a scheduled start; its latency is measured from then,
// so a target that cannot keep up shows it in the tail instead of hiding
// it by sending less (coordinated omission).
func openLoop(ctx context.Context, c *http.Client, base string, rate float64, workers int, warmup, d time.Duration) (OverheadResult, error) {
	interval := time.Duration(float64(time.Second) / rate)
	total := int((warmup + d).Seconds() * rate)
	warm := int(warmup.Seconds() * rate)
	sched := make(chan int, total)
	start := time.Now()
	var (
		rec recorder
		wg  sync.WaitGroup
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sid := "client-" + strconv.Itoa(w)
			var lat []float64
			errs := 0
			for k := range sched {
				at := start.Add(time.Duration(k) * interval)
				if wait := time.Until(at); wait > 0 {
					if !sleepCtx(ctx, wait) {
						break
					}
				}
				err := smallRequest(ctx, c, base, sid)
				if k < warm {
					continue
				}
				if err != nil {
					errs++
					continue
				}
				lat = append(lat, time.Since(at).Seconds())
			}
			rec.add(lat, errs)
		}()
	}
	for k := range total {
		sched <- k
	}
	close(sched)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return OverheadResult{}, err
	}
	elapsed := time.Since(start.Add(warmup))
	return rec.result(workers, rate, elapsed), nil
}
