package routerbench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/asyncrl/asyncrl/actors/router/proxy"
	"github.com/asyncrl/asyncrl/bench/workload"
	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/engine/latency"
)

// SessionHeader carries the conversation id on every request.
const SessionHeader = "X-Session-ID"

// Config is one cell of the policy comparison: a policy, a KV pressure and
// a workload on N engines.
type Config struct {
	// Policy is the router policy (policy.Policies).
	Policy string
	// Replicas is N, the number of built-in engines.
	Replicas int
	// Pressure sets each engine's KV capacity relative to the working set
	// of the conversations routed to it (its 1/N share: the shared prefix
	// once plus 1/N of everything else): 2 fits it twice (low pressure),
	// 1 exactly (moderate), 0.5 half (high). Capacity never goes below
	// one longest session (the engine must be able to run it alone).
	Pressure float64
	// TimeScale multiplies modelled step durations into real sleeps.
	TimeScale float64
	// Sessions is the workload; every session runs concurrently from the
	// start, with no think time except its Pause (× TimeScale).
	Sessions []workload.Session
	// SharedPrefix is the number of leading tokens all sessions share
	// (the agentic common prefix), counted once in the working set.
	SharedPrefix int
	// Latency is the engines' latency model; CacheBlocks is replaced by
	// the Pressure sizing.
	Latency latency.Config
	// PrefixBytes, when > 0, overrides the router's proxy.Config
	// PrefixBytes (how many leading prompt bytes form the prefix hash).
	PrefixBytes int
	// LoadFactor, when > 0, overrides bounded_sticky's c.
	LoadFactor float64
	// Publish, when set, publishes weight versions during the run with
	// staggered acks and sets the router's version rule (PublishConfig).
	Publish *PublishConfig
	// HAProxy, when set, puts HAProxy in front of the same engines instead
	// of the router: Policy is then HAProxyStick or HAProxyChash.
	HAProxy *HAProxyConfig
}

// DefaultConfig returns the comparison cell used in BENCHMARKS.md for a
// policy and pressure: 4 replicas, time scale 0.25, the engine's default
// latency model (step = 10 ms + 50 µs·batch + 40 µs·uncached prompt
// token). Sessions must still be set.
func DefaultConfig(policyName string, pressure float64) Config {
	return Config{
		Policy:    policyName,
		Replicas:  4,
		Pressure:  pressure,
		TimeScale: 0.25,
		Latency:   latency.DefaultConfig(),
	}
}

// Result is what one cell measured.
type Result struct {
	Policy   string
	Pressure float64
	// CacheBlocks is each engine's KV capacity (16-token blocks).
	CacheBlocks int
	// Wall is the wall-clock time from the first request to the last
	// finish_session.
	Wall time.Duration
	// Requests and Generated count completed requests and generated
	// tokens (from the responses' usage).
	Requests  int
	Generated int64
	// Modelled is the longest modelled busy clock among the engines (the
	// sum of its step durations; idle time does not count).
	Modelled time.Duration
	// ThroughputModelled is Generated / ConvMax: generated tokens per
	// second of modelled makespan (every session starts at once, so the
	// slowest one's modelled latency is the makespan).
	ThroughputModelled float64
	// ThroughputBusy is Generated / Modelled: the same tokens over the
	// busiest engine's modelled busy time (blind to idle gaps such as
	// tool pauses).
	ThroughputBusy float64
	// ThroughputWall is Generated / (Wall / TimeScale): wall throughput in
	// modelled-equivalent seconds; it includes the host's noise.
	ThroughputWall float64
	// TTFT50/90/99 are modelled time-to-first-token quantiles (s) from the
	// engines' merged vllm:time_to_first_token_seconds histograms.
	TTFT50, TTFT90, TTFT99 float64
	// Conv50/90/Max are per-conversation latencies in modelled seconds:
	// for each turn, how far the serving engine's modelled clock advanced
	// between sending the request and receiving the reply (so modelled
	// queueing, prefill and decode, plus the steps the engine ran while
	// the request was on the wire), summed over turns with the modelled
	// pauses.
	Conv50, Conv90, ConvMax float64
	// WallConv50/90/Max are the same latencies measured with the wall
	// clock, divided by TimeScale; they carry the host's noise (late
	// timers, CPU contention) on top of the model.
	WallConv50, WallConv90, WallConvMax float64
	// HitRate is vllm:prefix_cache_hits_total / queries_total summed over
	// the engines.
	HitRate float64
	// Preemptions sums vllm:num_preemptions_total.
	Preemptions float64
	// PerReplica counts requests per engine (X-Asyncrl-Replica), by index.
	PerReplica []int
	// Moved counts sessions that were served by more than one replica.
	Moved int
	// MoveTurns lists, for every change of replica within a session, the
	// turn (0-based) that landed on the new replica, sorted.
	MoveTurns []int
	// Outcomes counts the router's decisions by outcome.
	Outcomes map[string]float64
	// Rule is the router's version rule when Config.Publish was set, and
	// Publishes how many versions every replica acknowledged during the run.
	Rule      string `json:",omitempty"`
	Publishes int    `json:",omitempty"`
}

var engineMetrics = map[string]bool{
	"vllm:prefix_cache_queries_total":         true,
	"vllm:prefix_cache_hits_total":            true,
	"vllm:num_preemptions_total":              true,
	"vllm:time_to_first_token_seconds_bucket": true,
}

// capacityBlocks sizes one engine's KV cache for cfg (see Config.Pressure).
func capacityBlocks(cfg Config) int {
	ws := workload.WorkingSet(cfg.Sessions, cfg.SharedPrefix)
	share := float64(cfg.SharedPrefix) + float64(ws-cfg.SharedPrefix)/float64(cfg.Replicas)
	bs := cfg.Latency.BlockSize
	blocks := int(math.Ceil(cfg.Pressure * share / float64(bs)))
	longest := 0
	for i := range cfg.Sessions {
		longest = max(longest, cfg.Sessions[i].PlannedTokens())
	}
	return max(blocks, (longest+bs-1)/bs+1)
}

// RunAgentic starts cfg.Replicas engines behind a router with cfg.Policy,
// drives every session concurrently to its end (then POST
// /finish_session), reads the engines' /metrics, stops everything and
// returns what it measured. Any failed request fails the run.
func RunAgentic(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Replicas < 1 || len(cfg.Sessions) == 0 || !(cfg.Pressure > 0) || !(cfg.TimeScale >= 0) {
		return Result{}, fmt.Errorf("routerbench: need Replicas ≥ 1, sessions, Pressure > 0, TimeScale ≥ 0")
	}
	res := Result{Policy: cfg.Policy, Pressure: cfg.Pressure, CacheBlocks: capacityBlocks(cfg)}
	longest := 0
	for i := range cfg.Sessions {
		longest = max(longest, cfg.Sessions[i].PlannedTokens())
	}
	models := make([]engine.Model, cfg.Replicas)
	model := func(i int) engine.Model {
		m := engine.NewHashModel(1) // one weight version everywhere: same replies on every replica
		m.MaxLen = longest + 64
		models[i] = m
		return m
	}
	f, err := startFleet(engineConfigs(cfg, res.CacheBlocks), model, agenticProxyConfig(cfg, &res))
	if err != nil {
		return res, err
	}
	defer f.close()
	client := newClient(len(cfg.Sessions))
	defer client.CloseIdleConnections()

	index := map[string]int{}
	for i, u := range f.urls {
		index[u] = i
	}
	if cfg.HAProxy != nil { // HAProxy in front instead of the router
		hp, err := startHAProxy(*cfg.HAProxy, cfg.Policy, f.urls)
		if err != nil {
			return res, err
		}
		defer hp.stop()
		f.url = hp.url
		for i := range f.urls {
			index[haproxyServer(i)] = i
		}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	run := &agenticRun{cfg: cfg, f: f, client: client, index: index, ctx: ctx, cancel: cancel, perRep: make([]int, cfg.Replicas)}
	pubCtx, stopPub := context.WithCancel(ctx)
	defer stopPub()
	pubDone := make(chan error, 1)
	if cfg.Publish != nil {
		go func() {
			n, err := runPublisher(pubCtx, cfg.Publish, cfg.TimeScale, f, models)
			run.mu.Lock()
			res.Publishes = n
			run.mu.Unlock()
			pubDone <- err
		}()
	} else {
		pubDone <- nil
	}
	start := time.Now()
	var wg sync.WaitGroup
	for i := range cfg.Sessions {
		s := &cfg.Sessions[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			run.session(s)
		}()
	}
	wg.Wait()
	res.Wall = time.Since(start)
	stopPub()
	if err := <-pubDone; err != nil {
		return res, fmt.Errorf("routerbench: publisher: %w", err)
	}
	if err := context.Cause(ctx); err != nil {
		return res, err
	}
	res.Requests, res.Generated, res.PerReplica, res.Moved = run.requests, run.gen, run.perRep, run.moved
	slices.Sort(run.moveTurns)
	res.MoveTurns = run.moveTurns
	select {
	case err := <-f.errs: // a server that stopped serving mid-run
		return res, err
	default:
	}
	if err := engineFigures(ctx, client, f, &res); err != nil {
		return res, err
	}
	scale := cfg.TimeScale
	if scale == 0 {
		scale = 1
	}
	conv, wallConv := run.conv, run.wallConv
	res.Conv50, res.Conv90, res.ConvMax = percentile(conv, 0.5), percentile(conv, 0.9), percentile(conv, 1)
	res.WallConv50, res.WallConv90, res.WallConvMax = percentile(wallConv, 0.5)/scale, percentile(wallConv, 0.9)/scale, percentile(wallConv, 1)/scale
	res.Derive()
	res.ThroughputWall = float64(run.gen) / (res.Wall.Seconds() / scale)
	res.Outcomes = routerOutcomes(f)
	return res, nil
}

// engineConfigs is each replica's engine config: modelled time at cfg's
// scale and latency, a KV cache of cacheBlocks.
func engineConfigs(cfg Config, cacheBlocks int) []engine.Config {
	ecfgs := make([]engine.Config, cfg.Replicas)
	for i := range ecfgs {
		c := engine.DefaultConfig()
		c.MaxModelLen = 0 // the model's MaxSeqLen, sized below
		c.Seed = uint64(i)
		c.TimeScale = cfg.TimeScale
		c.Latency = cfg.Latency
		c.Latency.CacheBlocks = cacheBlocks
		ecfgs[i] = c
	}
	return ecfgs
}

// agenticProxyConfig is the router's config for cfg (setting res.Rule when
// versions are published).
func agenticProxyConfig(cfg Config, res *Result) proxy.Config {
	pc := proxy.DefaultConfig()
	if cfg.HAProxy == nil { // else the router is started but idle: HAProxy fronts the engines
		pc.Policy.Policy = cfg.Policy
	}
	if cfg.LoadFactor > 0 {
		pc.Policy.LoadFactor = cfg.LoadFactor
	}
	if cfg.PrefixBytes > 0 {
		pc.PrefixBytes = cfg.PrefixBytes
	}
	if cfg.Publish != nil {
		applyPublish(&pc, cfg.Publish)
		res.Rule = cfg.Publish.VersionRule
	}
	// The router's view of the engines ages in modelled time: scale the
	// scrape period and the freshness limit like every other duration.
	if cfg.TimeScale > 0 {
		pc.MetricsInterval = max(20*time.Millisecond, time.Duration(float64(pc.MetricsInterval)*cfg.TimeScale))
		pc.Policy.MetricsMaxAge = max(50*time.Millisecond, time.Duration(float64(pc.Policy.MetricsMaxAge)*cfg.TimeScale))
	}
	return pc
}

// agenticRun is one RunAgentic's sessions and what they measured (under
// mu); a failed request cancels ctx with its cause.
type agenticRun struct {
	cfg    Config
	f      *fleet
	client *http.Client
	index  map[string]int // replica name → index
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu        sync.Mutex
	conv      []float64
	wallConv  []float64
	perRep    []int
	requests  int
	gen       int64
	moved     int
	moveTurns []int
}

// session drives s to its end, then finishes it, and records its
// latencies and replica moves.
func (a *agenticRun) session(s *workload.Session) {
	ctx, f := a.ctx, a.f
	t0 := time.Now()
	seen := map[int]bool{}
	last := -1
	var moves []int
	var modelled time.Duration
	before := make([]time.Duration, len(f.engines))
	tr := s.Start()
	for {
		prompt, maxTok, pause, ok := tr.Next()
		if !ok {
			break
		}
		if pause > 0 && !sleepCtx(ctx, time.Duration(float64(pause)*a.cfg.TimeScale)) {
			return
		}
		modelled += pause
		for j, e := range f.engines {
			before[j] = e.Stats().Now
		}
		r, err := complete(ctx, a.client, f.url, s.ID, prompt, maxTok)
		if err != nil {
			a.cancel(fmt.Errorf("routerbench: %s turn %d: %w", s.ID, tr.Turn(), err))
			return
		}
		tr.Reply(r.tokens)
		rep, known := a.index[r.replica]
		if !known {
			a.cancel(fmt.Errorf("routerbench: %s: response from unknown replica %q", s.ID, r.replica))
			return
		}
		seen[rep] = true
		if last >= 0 && rep != last {
			moves = append(moves, tr.Turn()-1)
		}
		last = rep
		modelled += f.engines[rep].Stats().Now - before[rep]
		a.mu.Lock()
		a.perRep[rep]++
		a.requests++
		a.gen += int64(r.completion)
		a.mu.Unlock()
	}
	if err := finish(ctx, a.client, f.url, s.ID); err != nil {
		a.cancel(err)
		return
	}
	d := time.Since(t0)
	a.mu.Lock()
	a.wallConv = append(a.wallConv, d.Seconds())
	a.conv = append(a.conv, modelled.Seconds())
	if len(seen) > 1 {
		a.moved++
	}
	a.moveTurns = append(a.moveTurns, moves...)
	a.mu.Unlock()
}

// engineFigures reads the engines' modelled clocks and, over HTTP, their
// prefix-cache, preemption and time-to-first-token metrics into res.
func engineFigures(ctx context.Context, client *http.Client, f *fleet, res *Result) error {
	var hits, queries float64
	ttft := map[string]float64{}
	for i, e := range f.engines {
		res.Modelled = max(res.Modelled, e.Stats().Now)
		ss, err := scrape(ctx, client, f.urls[i], engineMetrics)
		if err != nil {
			return err
		}
		for _, s := range ss {
			switch s.name {
			case "vllm:prefix_cache_queries_total":
				queries += s.value
			case "vllm:prefix_cache_hits_total":
				hits += s.value
			case "vllm:num_preemptions_total":
				res.Preemptions += s.value
			default:
				ttft[s.le] += s.value
			}
		}
	}
	if queries > 0 {
		res.HitRate = hits / queries
	}
	var bs []bucket
	for le, n := range ttft {
		v, err := strconv.ParseFloat(le, 64)
		if err != nil {
			return fmt.Errorf("routerbench: ttft bucket le=%q: %w", le, err)
		}
		bs = append(bs, bucket{le: v, count: n})
	}
	res.TTFT50, res.TTFT90, res.TTFT99 = histogramQuantile(0.5, bs), histogramQuantile(0.9, bs), histogramQuantile(0.99, bs)
	return nil
}

// routerOutcomes counts the router's decisions by outcome.
func routerOutcomes(f *fleet) map[string]float64 {
	out := map[string]float64{}
	mfs, err := f.reg.Gather()
	if err != nil {
		return out
	}
	for _, mf := range mfs {
		if mf.GetName() != "asyncrl_router_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" {
					out[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// Derive computes the throughputs from the measured fields (also for
// results read back from JSON written by an older version).
func (r *Result) Derive() {
	if r.ConvMax > 0 {
		r.ThroughputModelled = float64(r.Generated) / r.ConvMax
	}
	if r.Modelled > 0 {
		r.ThroughputBusy = float64(r.Generated) / r.Modelled.Seconds()
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// reply is what the driver needs from one completion.
type reply struct {
	tokens     []int32
	completion int
	replica    string
}

// completionBody writes a /v1/completions request with token ids by hand:
// prompts reach 20k ids and encoding/json would dominate the client's CPU.
func completionBody(buf *bytes.Buffer, prompt []int32, maxTokens int) {
	buf.WriteString(`{"model":"asyncrl-policy","prompt":[`)
	var tmp [12]byte
	for i, id := range prompt {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(strconv.AppendInt(tmp[:0], int64(id), 10))
	}
	buf.WriteString(`],"max_tokens":`)
	buf.Write(strconv.AppendInt(tmp[:0], int64(maxTokens), 10))
	buf.WriteString(`,"temperature":0,"ignore_eos":true,"return_token_ids":true}`)
}

func complete(ctx context.Context, c *http.Client, base, session string, prompt []int32, maxTokens int) (reply, error) {
	var buf bytes.Buffer
	buf.Grow(len(prompt)*3 + 128)
	completionBody(&buf, prompt, maxTokens)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", &buf)
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(SessionHeader, session)
	resp, err := c.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return reply{}, fmt.Errorf("HTTP %d: %.300s", resp.StatusCode, body)
	}
	var out struct {
		Choices []struct {
			TokenIDs []int32 `json:"token_ids"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return reply{}, fmt.Errorf("decoding completion: %w", err)
	}
	if len(out.Choices) != 1 || len(out.Choices[0].TokenIDs) != maxTokens {
		return reply{}, fmt.Errorf("want 1 choice of %d tokens (ignore_eos), got %d choices", maxTokens, len(out.Choices))
	}
	return reply{tokens: out.Choices[0].TokenIDs, completion: out.Usage.CompletionTokens, replica: resp.Header.Get(proxy.ReplicaHeader)}, nil
}

func finish(ctx context.Context, c *http.Client, base, session string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/finish_session?session_id="+url.QueryEscape(session), nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("routerbench: finish_session %s: %w", session, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("routerbench: finish_session %s: HTTP %d", session, resp.StatusCode)
	}
	return nil
}
