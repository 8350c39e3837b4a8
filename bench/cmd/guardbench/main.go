// Command guardbench measures what the engine guard (engine/guard,
// `asyncrl engine-guard`) costs in request throughput: the same closed-loop
// load (C workers on keep-alive connections, POST /v1/completions with a
// small token-id body and the key) straight to an engine and through a
// guard in front of that same engine, in interleaved repetitions (direct,
// guard, guard, direct, …), in one process on loopback.
//
// Engines (real HTTP servers, net/http):
//
//   - tiny: answers {"ok":true} at once — the guard's own cost, as a
//     fraction of the cheapest possible exchange;
//
//   - completion: answers a completion of -tokens tokens with token ids and
//     logprobs (vLLM's /v1/completions shape, ≈ 80 bytes a token) at once —
//     adds the copying of a realistic answer;
//
//   - completion_<d>: the same answer after each of -delays, an engine that
//     spends time per request as a real one does (a GPU engine decoding
//     256 tokens takes longer than the 500 ms cell).
//
//     go run ./bench/cmd/guardbench -reps 5 -dur 2s -c 32   (make bench-guard)
//
// Prints req/s per cell, the guard/direct ratio per repetition and the
// median, and the guard's added time per request at saturation
// (1/rps_guard − 1/rps_direct).
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/engine/guard"
)

const key = "guardbench-key"

func main() {
	reps := flag.Int("reps", 5, "repetitions of each cell (interleaved)")
	dur := flag.Duration("dur", 2*time.Second, "duration of one cell")
	conc := flag.Int("c", 32, "concurrent workers (keep-alive connections)")
	tokens := flag.Int("tokens", 256, "tokens in the completion answer")
	delays := flag.String("delays", "50ms,500ms", "times the completion_<delay> engines spend per request (comma-separated)")
	only := flag.String("engines", "tiny,completion,completion_delay", "engines to measure (comma-separated; completion_delay is one engine per -delays entry)")
	cpuprof := flag.String("cpuprofile", "", "write a CPU profile of the guard cells' run to `FILE`")
	jsonOut := flag.String("json", "", "also write the results as JSON to `FILE`")
	flag.Parse()
	var ds []time.Duration
	for _, d := range strings.Split(*delays, ",") {
		v, err := time.ParseDuration(strings.TrimSpace(d))
		if err != nil {
			fmt.Fprintln(os.Stderr, "guardbench: -delays:", err)
			os.Exit(2)
		}
		ds = append(ds, v)
	}
	if err := run(*reps, *dur, *conc, *tokens, ds, strings.Split(*only, ","), *cpuprof, *jsonOut); err != nil {
		fmt.Fprintln(os.Stderr, "guardbench:", err)
		os.Exit(1)
	}
}

// result is one engine's figures.
type result struct {
	Engine      string    `json:"engine"`
	AnswerBytes int       `json:"answer_bytes"`
	Direct      []float64 `json:"direct_rps"`
	Proxy       []float64 `json:"plain_proxy_rps"`
	Guard       []float64 `json:"guard_rps"`
	Ratios      []float64 `json:"ratios"` // guard / direct, per repetition
	ProxyRatios []float64 `json:"proxy_ratios"`
	MedianRatio float64   `json:"median_ratio"`
	AddedMicros float64   `json:"added_us_per_request"`
	// CPU is the process's CPU time (user+system) per request in each
	// cell, µs, medians: the guard's own CPU cost is Guard − Direct.
	CPUDirect float64 `json:"cpu_us_direct"`
	CPUProxy  float64 `json:"cpu_us_plain_proxy"`
	CPUGuard  float64 `json:"cpu_us_guard"`
	Errors    int64   `json:"errors"`
}

func run(reps int, dur time.Duration, conc, tokens int, delays []time.Duration, engines []string, cpuprof, jsonOut string) error {
	fmt.Printf("guardbench: %s %s/%s, GOMAXPROCS %d, %d cores; %d reps × %v per cell, %d workers\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), runtime.NumCPU(), reps, dur, conc)
	completion := completionBody(tokens)
	var prof *os.File
	if cpuprof != "" {
		f, err := os.Create(cpuprof)
		if err != nil {
			return err
		}
		defer f.Close()
		prof = f
	}
	type spec struct {
		name  string
		body  []byte
		delay time.Duration
	}
	var specs []spec
	for _, name := range engines {
		switch name {
		case "tiny":
			specs = append(specs, spec{name, []byte(`{"ok":true}`), 0})
		case "completion":
			specs = append(specs, spec{name, completion, 0})
		case "completion_delay":
			for _, d := range delays {
				specs = append(specs, spec{fmt.Sprintf("completion_%v", d), completion, d})
			}
		default:
			return fmt.Errorf("unknown engine %q (tiny, completion, completion_delay)", name)
		}
	}
	var results []result
	for _, sp := range specs {
		r, err := measure(sp.name, sp.body, sp.delay, reps, dur, conc, prof)
		if err != nil {
			return err
		}
		prof = nil // profile the first engine's guard cells only
		results = append(results, r)
	}
	fmt.Printf("\n%-22s %8s %11s %11s %11s %12s %12s %26s\n", "engine", "answer", "direct rps", "proxy rps", "guard rps", "guard/direct", "proxy/direct", "CPU µs/req direct/proxy/guard")
	for _, r := range results {
		fmt.Printf("%-22s %7dB %11.0f %11.0f %11.0f %12.3f %12.3f %12.0f / %4.0f / %4.0f\n", r.Engine, r.AnswerBytes,
			median(r.Direct), median(r.Proxy), median(r.Guard), r.MedianRatio, median(r.ProxyRatios), r.CPUDirect, r.CPUProxy, r.CPUGuard)
	}
	if jsonOut != "" {
		b, _ := json.MarshalIndent(results, "", "  ")
		return os.WriteFile(jsonOut, append(b, '\n'), 0o644)
	}
	return nil
}

// measure runs the interleaved cells for one engine: direct, through a
// plain httputil.ReverseProxy on the guard's transport (what the hop
// itself costs), and through the guard.
func measure(name string, body []byte, delay time.Duration, reps int, dur time.Duration, conc int, prof *os.File) (result, error) {
	eng, err := serve(engineHandler(body, delay))
	if err != nil {
		return result{}, err
	}
	defer eng.Close()
	g, err := guard.New(guard.Config{Upstream: "http://" + eng.Addr, Key: key, Logger: zerolog.Nop()})
	if err != nil {
		return result{}, err
	}
	gs, err := serve(g)
	if err != nil {
		return result{}, err
	}
	defer gs.Close()
	eu, _ := url.Parse("http://" + eng.Addr)
	// The same hop without the key check: httputil.ReverseProxy on the
	// guard's transport. guard − proxy is the check's own cost.
	plain := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(eu) },
		Transport: guard.DefaultTransport(),
		ErrorLog:  log.New(io.Discard, "", 0),
	}
	ps, err := serve(plain)
	if err != nil {
		return result{}, err
	}
	defer ps.Close()
	targets := map[string]string{"direct": eng.Addr, "proxy": ps.Addr, "guard": gs.Addr}

	r := result{Engine: name, AnswerBytes: len(body)}
	// Warm every path (connections, pools) before measuring.
	for _, u := range targets {
		if _, err := load("http://"+u, 300*time.Millisecond, conc); err != nil {
			return r, err
		}
	}
	cpu := map[string][]float64{}
	orders := [][]string{{"direct", "proxy", "guard"}, {"guard", "proxy", "direct"}, {"proxy", "guard", "direct"}}
	for i := 0; i < reps; i++ {
		rps := map[string]float64{}
		for _, which := range orders[i%len(orders)] {
			if which == "guard" && prof != nil {
				_ = pprof.StartCPUProfile(prof)
			}
			c, err := load("http://"+targets[which], dur, conc)
			if which == "guard" && prof != nil {
				pprof.StopCPUProfile()
				prof = nil
			}
			if err != nil {
				return r, err
			}
			r.Errors += c.failed
			rps[which] = c.rps
			cpu[which] = append(cpu[which], c.cpuMicros)
		}
		r.Direct, r.Proxy, r.Guard = append(r.Direct, rps["direct"]), append(r.Proxy, rps["proxy"]), append(r.Guard, rps["guard"])
		r.Ratios = append(r.Ratios, rps["guard"]/rps["direct"])
		r.ProxyRatios = append(r.ProxyRatios, rps["proxy"]/rps["direct"])
		fmt.Printf("%-22s rep %d: direct %8.0f rps, plain proxy %8.0f, guard %8.0f; guard/direct %.3f; CPU µs/req %.0f %.0f %.0f\n",
			name, i+1, rps["direct"], rps["proxy"], rps["guard"], rps["guard"]/rps["direct"],
			cpu["direct"][i], cpu["proxy"][i], cpu["guard"][i])
	}
	r.MedianRatio = median(r.Ratios)
	r.AddedMicros = (1/median(r.Guard) - 1/median(r.Direct)) * 1e6
	r.CPUDirect, r.CPUProxy, r.CPUGuard = median(cpu["direct"]), median(cpu["proxy"]), median(cpu["guard"])
	return r, nil
}

// engineHandler answers every request with body after delay, reading the
// request body first as an engine does.
func engineHandler(body []byte, delay time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if delay > 0 {
			time.Sleep(delay)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})
}

type server struct {
	Addr string
	srv  *http.Server
}

func serve(h http.Handler) (*server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &server{Addr: ln.Addr().String(), srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *server) Close() { _ = s.srv.Close() }

var reqBody = []byte(`{"model":"Qwen/Qwen3-0.6B","prompt":[151643,9707,11,1588,374,264,1273],"max_tokens":256,"temperature":1.0,"logprobs":0,"return_token_ids":true}`)

// cell is one load run's figures.
type cell struct {
	rps       float64
	failed    int64
	cpuMicros float64 // process CPU time per completed request
}

// load runs conc closed-loop workers against base for dur and returns the
// throughput, the failed requests and the process's CPU time per request.
// A worker issues no request after dur but finishes the one in flight, and
// the throughput is Σ over workers of requests/busy time: a closed loop's
// exact rate, with no request cut at the deadline (an engine that takes
// 500 ms a request would otherwise lose up to a tenth of a 5 s cell).
func load(base string, dur time.Duration, conc int) (cell, error) {
	tr := &http.Transport{MaxIdleConnsPerHost: conc, MaxConnsPerHost: conc, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: time.Minute}
	var failed atomic.Int64
	var wg sync.WaitGroup
	rates := make([]float64, conc)
	counts := make([]int64, conc)
	cpu0 := cpuTime()
	end := time.Now().Add(dur)
	for i := 0; i < conc; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			var n int64
			for time.Now().Before(end) {
				req, _ := http.NewRequest(http.MethodPost, base+"/v1/completions", bytes.NewReader(reqBody))
				req.Header.Set("Authorization", "Bearer "+key)
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					failed.Add(1)
					continue
				}
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK {
					failed.Add(1)
					continue
				}
				n++
			}
			if busy := time.Since(start).Seconds(); busy > 0 {
				rates[i], counts[i] = float64(n)/busy, n
			}
		}()
	}
	wg.Wait()
	used := cpuTime() - cpu0
	var rps float64
	var n int64
	for i := range rates {
		rps += rates[i]
		n += counts[i]
	}
	if n == 0 {
		return cell{failed: failed.Load()}, fmt.Errorf("no request to %s completed (%d failed)", base, failed.Load())
	}
	return cell{rps: rps, failed: failed.Load(), cpuMicros: float64(used.Microseconds()) / float64(n)}, nil
}

// cpuTime is the process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// completionBody is a vLLM /v1/completions answer of n tokens with token
// ids and per-token logprobs (the shape of
// engine/enginetest/testdata/vllm/completions.json).
func completionBody(n int) []byte {
	ids := make([]int, n)
	lps := make([]float64, n)
	toks := make([]string, n)
	offs := make([]int, n)
	top := make([]map[string]float64, n)
	var text strings.Builder
	for i := range ids {
		ids[i] = 1000 + (i*7919)%150000
		lps[i] = -0.1 - float64(i%37)/10
		toks[i] = fmt.Sprintf("token_id:%d", ids[i])
		offs[i] = text.Len()
		top[i] = map[string]float64{toks[i]: lps[i]}
		text.WriteString(" tok")
	}
	b, _ := json.Marshal(map[string]any{
		"id": "cmpl-bench", "object": "text_completion", "created": 1764633600, "model": "Qwen/Qwen3-0.6B",
		"choices": []any{map[string]any{
			"index": 0, "text": text.String(), "token_ids": ids, "finish_reason": "length",
			"logprobs": map[string]any{"text_offset": offs, "token_logprobs": lps, "tokens": toks, "top_logprobs": top},
		}},
		"usage": map[string]int{"prompt_tokens": 7, "completion_tokens": n, "total_tokens": n + 7},
	})
	return b
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
