// Package tinkerload is the Tinker server's load benchmark: N sample
// futures in flight through one server process at once (the stub engine
// holds its requests until all N are submitted, then answers each after a
// delay), polled over a bounded number of connections, the answers read as
// JSON or, as tinker SDK 0.25 reads them, as protobuf (Options.Protobuf).
// It reports errors, futures lost, RSS per in-flight sample,
// retrieve_future latency percentiles and requests per second
// (bench/cmd/tinkerload, `make bench-tinker`, BENCHMARKS.md "Tinker
// server").
package tinkerload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/tinker"
	"github.com/asyncrl/asyncrl/tinker/client"
	"github.com/asyncrl/asyncrl/tinker/server"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// Options configure one run.
type Options struct {
	// N is the number of sample futures submitted (all before any is read).
	N int
	// Delay is how long the stub engine takes per completion.
	Delay time.Duration
	// EngineConcurrency is tinker.sample_concurrency (server → engine).
	EngineConcurrency int
	// Conns bounds the client's connections (submitters and pollers).
	Conns int
	// Tokens is the completion length the stub returns.
	Tokens int
	// Dir holds the JetStream store (a temp dir).
	Dir string
	// Protobuf polls as tinker SDK 0.25 does (Accept:
	// application/x-protobuf) and reads the answers as it does
	// (tinker/wire); false polls without Accept and reads JSON.
	Protobuf bool
}

// Result is one run's figures.
type Result struct {
	Mode                        string // json | protobuf
	N, Errors, Lost, TryAgain   int
	PeakPending                 int
	RSSBaseMB, RSSPeakMB        float64
	RSSPerInFlightKB            float64
	HeapPerInFlightKB           float64
	SubmitSeconds, TotalSeconds float64
	RetrieveP50ms, RetrieveP99  float64
	Requests                    int64
	RequestsPerSec              float64
}

func (r Result) String() string {
	return fmt.Sprintf("mode=%s n=%d errors=%d lost=%d peak_pending=%d rss_base=%.0fMB rss_peak=%.0fMB rss/inflight=%.2fKB heap/inflight=%.2fKB submit=%.2fs total=%.2fs retrieve_p50=%.2fms retrieve_p99=%.2fms try_again=%d requests=%d req/s=%.0f",
		r.Mode, r.N, r.Errors, r.Lost, r.PeakPending, r.RSSBaseMB, r.RSSPeakMB, r.RSSPerInFlightKB, r.HeapPerInFlightKB,
		r.SubmitSeconds, r.TotalSeconds, r.RetrieveP50ms, r.RetrieveP99, r.TryAgain, r.Requests, r.RequestsPerSec)
}

// stubEngine answers /v1/completions with tokens ids and logprobs after
// gate is closed and delay has passed, accepts LoRA loads and answers
// the router's health probes.
func stubEngine(delay time.Duration, tokens int, gate <-chan struct{}) (string, func(), error) {
	ids := make([]int32, tokens)
	lps := make([]float32, tokens)
	for i := range ids {
		ids[i], lps[i] = int32(3+i%90), -1.5
	}
	choice := map[string]any{"index": 0, "text": "", "token_ids": ids, "output_logprobs": lps, "finish_reason": "length"}
	body, _ := json.Marshal(map[string]any{"id": "cmpl", "object": "text_completion", "choices": []any{choice}})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			N int `json:"n"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		<-gate
		time.Sleep(delay)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})
	mux.HandleFunc("POST /v1/load_lora_adapter", func(w http.ResponseWriter, _ *http.Request) {})
	// The server's router probes it like any vLLM (an empty 200).
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}

// rssMB reads VmRSS from /proc/self/status (0 where there is none).
func rssMB() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

func heapMB() float64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapInuse) / (1 << 20)
}

// poll is one retrieve_future and the reading of its answer, as SDK 0.25
// (protobuf) or an SDK without Accept (JSON) does both. The retrieve
// latency the benchmark reports covers both: what a caller waits for.
func poll(ctx context.Context, c *client.Client, id string, protobuf bool) (tinker.SampleResponse, bool, error) {
	var out tinker.SampleResponse
	if protobuf {
		a, done, err := c.PollAccept(ctx, id, client.AcceptProtobuf)
		if err != nil || !done {
			return out, done, err
		}
		out, err = client.ReadSample(a, client.AcceptProtobuf)
		return out, true, err
	}
	raw, done, err := c.Poll(ctx, id)
	if err != nil || !done {
		return out, done, err
	}
	err = json.Unmarshal(raw, &out)
	return out, true, err
}

// Run runs the benchmark.
func Run(ctx context.Context, o Options) (Result, error) {
	gate := make(chan struct{})
	released := false
	release := func() {
		if !released {
			released = true
			close(gate)
		}
	}
	defer release()
	engURL, stopEngine, err := stubEngine(o.Delay, o.Tokens, gate)
	if err != nil {
		return Result{}, err
	}
	defer stopEngine()
	srv, addr, stopServer, err := startServer(ctx, o, engURL)
	if err != nil {
		return Result{}, err
	}
	defer stopServer()

	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxConnsPerHost, tr.MaxIdleConnsPerHost = o.Conns, o.Conns
	c := &client.Client{BaseURL: "http://" + addr, HTTP: &http.Client{Transport: tr}}
	sess, err := c.CreateSession(ctx)
	if err != nil {
		return Result{}, err
	}
	sampler, err := c.CreateSamplingSession(ctx, sess, 0, "asyncrl-policy", "")
	if err != nil {
		return Result{}, err
	}
	runtime.GC()
	res := Result{Mode: "json", N: o.N, RSSBaseMB: rssMB()}
	if o.Protobuf {
		res.Mode = "protobuf"
	}
	heap0 := heapMB()
	l := &loadRun{ctx: ctx, c: c, o: o, ids: make([]string, o.N), lat: make([][]time.Duration, o.Conns)}

	// Phase 1: submit every sample; the futures answer at once.
	start := time.Now()
	l.submit(sampler)
	res.SubmitSeconds = time.Since(start).Seconds()
	// Every future is in flight now: the engine holds its first
	// engine-concurrency requests until released, the rest are queued.
	runtime.GC()
	res.PeakPending = srv.PendingFutures()
	peakRSS, peakHeap := rssMB(), heapMB()
	release()

	// Phase 2: long-poll every future to its result.
	l.retrieve()
	res.TotalSeconds = time.Since(start).Seconds()
	res.Errors = int(l.errs.Load())
	res.Lost = o.N - int(l.got.Load())
	res.TryAgain = int(l.tryAgain.Load())
	res.Requests = l.requests.Load()
	res.RequestsPerSec = float64(res.Requests) / res.TotalSeconds
	res.RSSPeakMB = peakRSS
	if res.PeakPending > 0 {
		res.RSSPerInFlightKB = (peakRSS - res.RSSBaseMB) * 1024 / float64(res.PeakPending)
		res.HeapPerInFlightKB = (peakHeap - heap0) * 1024 / float64(res.PeakPending)
	}
	var all []time.Duration
	for _, lw := range l.lat {
		all = append(all, lw...)
	}
	slices.Sort(all)
	if len(all) > 0 {
		res.RetrieveP50ms = float64(all[len(all)/2]) / 1e6
		res.RetrieveP99 = float64(all[len(all)*99/100]) / 1e6
	}
	if e, ok := l.firstErr.Load().(string); ok {
		return res, errors.New("first error: " + e)
	}
	return res, nil
}

// startServer starts an embedded NATS bus and a Tinker server on the
// built-in policy in front of the engine at engURL, serving HTTP on a
// loopback port; stop closes the HTTP server, the Tinker server and the
// bus, in that order.
func startServer(ctx context.Context, o Options, engURL string) (srv *server.Server, addr string, stop func(), err error) {
	bopts := natsbus.DefaultOptions()
	bopts.StoreDir = o.Dir
	bus, err := natsbus.Connect(ctx, bopts)
	if err != nil {
		return nil, "", nil, err
	}
	base, err := model.New(model.DefaultConfig(), 1)
	if err != nil {
		bus.Close()
		return nil, "", nil, err
	}
	tc := config.DefaultTinker()
	tc.SampleQueue = max(o.N, 1024)
	tc.SampleConcurrency = o.EngineConcurrency
	tc.MaxPendingPerSession = max(o.N, 1024)
	tc.LongPoll = 5 * time.Second
	srv, err = server.New(ctx, server.Config{Tinker: tc, BaseModel: "asyncrl-policy", Backend: server.GoBackend(base),
		EngineURLs: []string{engURL}, DataDir: o.Dir, NATS: bus.Conn(), Log: zerolog.Nop()})
	if err != nil {
		bus.Close()
		return nil, "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		srv.Close()
		bus.Close()
		return nil, "", nil, err
	}
	hs := &http.Server{Handler: srv.Handler()}
	go func() { _ = hs.Serve(ln) }()
	return srv, ln.Addr().String(), func() {
		hs.Close()
		srv.Close()
		bus.Close()
	}, nil
}

// loadRun is one Run's clients' shared state: the futures' ids, the
// per-worker retrieve latencies, and the counters.
type loadRun struct {
	ctx context.Context
	c   *client.Client
	o   Options

	ids      []string
	lat      [][]time.Duration
	next     atomic.Int64
	requests atomic.Int64
	errs     atomic.Int64
	firstErr atomic.Value
	tryAgain atomic.Int64
	got      atomic.Int64
}

func (l *loadRun) noteErr(err error) {
	l.errs.Add(1)
	l.firstErr.CompareAndSwap(nil, err.Error())
}

// submit submits every sample over o.Conns workers, keeping each future's
// id.
func (l *loadRun) submit(sampler string) {
	var wg sync.WaitGroup
	prompt := []int32{1, 5, 6, 7, 8}
	for range l.o.Conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(l.next.Add(1) - 1)
				if i >= l.o.N {
					return
				}
				id, err := l.c.ASample(l.ctx, client.SampleRequest(sampler, int64(i), prompt, 1, l.o.Tokens, 1))
				l.requests.Add(1)
				if err != nil {
					l.noteErr(err)
					continue
				}
				l.ids[i] = id
			}
		}()
	}
	wg.Wait()
}

// retrieve long-polls every future to its result over o.Conns workers.
func (l *loadRun) retrieve() {
	var wg sync.WaitGroup
	l.next.Store(0)
	for w := range l.o.Conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(l.next.Add(1) - 1)
				if i >= l.o.N {
					return
				}
				if l.ids[i] != "" {
					l.pollFuture(w, i)
				}
			}
		}()
	}
	wg.Wait()
}

// pollFuture polls future i until it answers (or fails), timing each poll
// in worker w's latencies.
func (l *loadRun) pollFuture(w, i int) {
	o := l.o
	for {
		t0 := time.Now()
		out, done, err := poll(l.ctx, l.c, l.ids[i], o.Protobuf)
		l.lat[w] = append(l.lat[w], time.Since(t0))
		l.requests.Add(1)
		if err != nil {
			l.noteErr(err)
			return
		}
		if !done {
			l.tryAgain.Add(1)
			continue
		}
		if len(out.Sequences) != 1 || len(out.Sequences[0].Tokens) != o.Tokens || len(out.Sequences[0].Logprobs) != o.Tokens {
			l.noteErr(fmt.Errorf("future %s: bad result %+v", l.ids[i], out))
			return
		}
		l.got.Add(1)
		return
	}
}
