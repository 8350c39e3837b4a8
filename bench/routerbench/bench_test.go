package routerbench

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/actors/router/policy"
	"github.com/asyncrl/asyncrl/actors/router/proxy"
)

// The full comparison and overhead sweep are long; they live in
// `go run ./bench/cmd/routerbench` (see BENCHMARKS.md). These benchmarks
// are the short versions `make bench` runs.

// BenchmarkRoundTrip: one small completion request straight to a trivial
// backend and through the router to it; the difference is the router's
// added latency at concurrency 1 (sequential) and GOMAXPROCS×4
// (parallel).
func BenchmarkRoundTrip(b *testing.B) {
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	backURL, back, err := serve(&wg, errs, http.HandlerFunc(trivialBackend))
	if err != nil {
		b.Fatal(err)
	}
	pc := proxy.DefaultConfig()
	pc.Replicas = []string{backURL}
	rt, err := proxy.New(pc)
	if err != nil {
		b.Fatal(err)
	}
	routerURL, front, err := serve(&wg, errs, rt.Handler())
	if err != nil {
		b.Fatal(err)
	}
	client := newClient(256)
	b.Cleanup(func() {
		client.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = front.Shutdown(ctx)
		_ = rt.Shutdown(ctx)
		_ = back.Shutdown(ctx)
		wg.Wait()
	})
	for _, target := range []struct{ name, url string }{{"direct", backURL}, {"router", routerURL}} {
		b.Run(target.name+"/sequential", func(b *testing.B) {
			for b.Loop() {
				if err := smallRequest(context.Background(), client, target.url, "s"); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(target.name+"/parallel", func(b *testing.B) {
			b.SetParallelism(4)
			var n atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				sid := "s" + strconv.FormatInt(n.Add(1), 10)
				for pb.Next() {
					if err := smallRequest(context.Background(), client, target.url, sid); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkAgenticSmall runs a small agentic workload (4 conversations ×
// 8 turns, 2 replicas, time scale 0, moderate KV pressure) per policy and
// reports the modelled figures; one op is the whole workload.
func BenchmarkAgenticSmall(b *testing.B) {
	for _, pol := range policy.Policies {
		b.Run(pol, func(b *testing.B) {
			ss, wc := smallWorkloadB(b, 4, 8)
			cfg := DefaultConfig(pol, 1)
			cfg.Replicas, cfg.TimeScale, cfg.Sessions, cfg.SharedPrefix = 2, 0, ss, wc.PrefixTokens
			var hit, tput float64
			for b.Loop() {
				r, err := RunAgentic(context.Background(), cfg)
				if err != nil {
					b.Fatal(err)
				}
				hit, tput = r.HitRate, r.ThroughputModelled
			}
			b.ReportMetric(hit*100, "hit%")
			b.ReportMetric(tput, "modelled-tok/s")
		})
	}
}
