// Command routerbench runs the router benchmarks of BENCHMARKS.md: the
// policy comparison on the 40-turn agentic workload (-mode compare), the
// version rules under periodic publishes with staggered acks (-mode
// publish) and the router's added latency (-mode overhead). It prints markdown tables
// (medians over -reps repetitions, policies interleaved within each
// repetition) and, with -json, every raw result.
//
//	go run ./bench/cmd/routerbench -mode compare -reps 3
//	go run ./bench/cmd/routerbench -mode publish -reps 3 -policies bounded_sticky,sticky_least_loaded -pressures 1
//	go run ./bench/cmd/routerbench -mode overhead -reps 3
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/asyncrl/asyncrl/actors/router/policy"
	"github.com/asyncrl/asyncrl/bench/routerbench"
	"github.com/asyncrl/asyncrl/bench/workload"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "routerbench:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		mode      = flag.String("mode", "compare", "compare (policies on the agentic workload), publish (version rules under periodic publishes) or overhead (router added latency)")
		wl        = flag.String("workload", "agentic", "compare: agentic (C conversations × T turns) or groups (G groups × n samples, 10–40 turns, tool latency)")
		convs     = flag.Int("conversations", 32, "C: concurrent conversations")
		groups    = flag.Int("groups", 4, "G: groups of the groups workload")
		samples   = flag.Int("samples", 8, "n: samples per group of the groups workload")
		turns     = flag.Int("turns", 40, "T: turns per conversation")
		replicas  = flag.Int("replicas", 4, "N: built-in engines")
		scale     = flag.Float64("timescale", 0.25, "engine time scale (real sleep = modelled duration × scale)")
		policies  = flag.String("policies", strings.Join([]string{policy.ConsistentHash, policy.StickyLeastLoaded, policy.BoundedSticky, policy.RoundRobin, policy.LeastRequest}, ","), "comma-separated policies, each optionally with bounded_sticky's load factor (bounded_sticky@c=2), or haproxy_stick / haproxy_chash (HAProxy in front instead, see -haproxy); the first is the ratio baseline")
		pressures = flag.String("pressures", "2,1,0.5", "KV capacity / per-replica working set, comma-separated")
		reps      = flag.Int("reps", 3, "repetitions (medians are taken over them)")
		seed      = flag.Uint64("seed", 1, "workload seed")
		prefixB   = flag.Int("prefix-bytes", 0, "router PrefixBytes override (0 = the router default)")
		clients   = flag.String("clients", "1,16,64,256", "overhead: concurrent clients, comma-separated")
		dur       = flag.Duration("duration", 3*time.Second, "overhead: measuring time per level and target")
		rate      = flag.Float64("rate", 2000, "overhead: open-loop request rate for the fixed-rate test (0 = skip)")
		pubEvery  = flag.Duration("publish-every", 8*time.Second, "publish: modelled time between two publishes")
		stagger   = flag.Duration("ack-stagger", 1500*time.Millisecond, "publish: modelled time between two replicas' acks of a version")
		rules     = flag.String("version-rules", policy.VersionNewest+","+policy.VersionStaleness, "publish: router version rules, comma-separated; the first is the ratio baseline")
		maxLag    = flag.Int64("max-version-lag", 2, "publish: staleness budget in versions (router and publisher; the run default is trainer.max_staleness_steps = 2)")
		haproxy   = flag.String("haproxy", "haproxy", "compare: the HAProxy binary for the haproxy_stick and haproxy_chash entries of -policies (HAProxy 2.6 in front of the same engines instead of the router)")
		haTmpl    = flag.String("haproxy-template", "bench/haproxy/haproxy.cfg.tmpl", "compare: HAProxy config template")
		jsonOut   = flag.String("json", "", "write raw results as JSON to this file")
		fromJSON  = flag.String("from-json", "", "print the tables of raw results written by -json instead of running")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	fmt.Printf("machine: %d CPUs (GOMAXPROCS %d), %s, %s/%s\n", runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if *fromJSON != "" {
		return render(*mode, *fromJSON, split(*policies)[0])
	}
	switch *mode {
	case "compare", "publish":
		sessions, shared, desc, err := makeWorkload(*wl, *convs, *turns, *groups, *samples, *seed)
		if err != nil {
			return err
		}
		fmt.Printf("workload: %s; %d replicas, time scale %g\n", desc, *replicas, *scale)
		if *mode == "publish" {
			pub := routerbench.PublishConfig{Every: *pubEvery, Stagger: *stagger, MaxVersionLag: *maxLag, Seed: *seed}
			fmt.Printf("publish: every %v (modelled), acks %v apart in a seeded random order, staleness budget %d\n", *pubEvery, *stagger, *maxLag)
			return publishCompare(ctx, sessions, shared, *replicas, *scale, split(*policies), split(*rules), *pressures, *reps, pub, *jsonOut)
		}
		hp := routerbench.HAProxyConfig{Binary: *haproxy, Template: *haTmpl}
		return compare(ctx, sessions, shared, *replicas, *scale, split(*policies), *pressures, *reps, *prefixB, hp, *jsonOut)
	case "overhead":
		cs, err := ints(*clients)
		if err != nil {
			return err
		}
		return overhead(ctx, cs, *dur, *rate, *reps, *jsonOut)
	}
	return fmt.Errorf("-mode %q: want compare, publish or overhead", *mode)
}

// policySpec parses "policy" or "policy@c=1.5" (bounded_sticky's load
// factor c), so a variant can be compared side by side with the default.
func policySpec(spec string) (name string, c float64, err error) {
	name, opt, ok := strings.Cut(spec, "@")
	if !ok {
		return name, 0, nil
	}
	v, found := strings.CutPrefix(opt, "c=")
	if !found {
		return "", 0, fmt.Errorf("policy %q: want policy or policy@c=FACTOR", spec)
	}
	if c, err = strconv.ParseFloat(v, 64); err != nil || c < 1 {
		return "", 0, fmt.Errorf("policy %q: c must be a number ≥ 1", spec)
	}
	return name, c, nil
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range split(s) {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("bad integer %q: %w", f, err)
		}
		out = append(out, n)
	}
	return out, nil
}

// floats parses a comma-separated list of numbers; strconv's error names
// the bad one.
func floats(s string) ([]float64, error) {
	var out []float64
	for _, f := range split(s) {
		x, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, nil
}

// makeWorkload generates the named workload and describes it.
func makeWorkload(name string, convs, turns, groups, samples int, seed uint64) ([]workload.Session, int, string, error) {
	rng := rand.New(rand.NewPCG(seed, 0))
	var (
		ss     []workload.Session
		shared int
		err    error
	)
	switch name {
	case "agentic":
		wc := workload.DefaultAgentic(convs)
		wc.Turns = turns
		ss, err = workload.Agentic(wc, rng)
		shared = wc.PrefixTokens
	case "groups":
		gc := workload.DefaultGroups(groups)
		gc.Samples = samples
		ss, err = workload.Groups(gc, rng)
	default:
		return nil, 0, "", fmt.Errorf("-workload %q: want agentic or groups", name)
	}
	if err != nil {
		return nil, 0, "", err
	}
	reqs, gen := 0, 0
	for i := range ss {
		reqs += ss[i].Turns()
		gen += ss[i].GeneratedTokens()
	}
	desc := fmt.Sprintf("%s, %d sessions (seed %d), %d requests, %d generated tokens", name, len(ss), seed, reqs, gen)
	if name == "agentic" {
		desc = fmt.Sprintf("agentic, %d conversations × %d turns (seed %d), %d requests, %d generated tokens", convs, turns, seed, reqs, gen)
	}
	return ss, shared, desc, nil
}

func compare(ctx context.Context, sessions []workload.Session, shared, replicas int, scale float64, pols []string, pressures string, reps int, prefixBytes int,
	hp routerbench.HAProxyConfig, jsonOut string) error {
	ps, err := floats(pressures)
	if err != nil {
		return fmt.Errorf("-pressures: %w", err)
	}
	var all [][]routerbench.Result
	for rep := range reps {
		var rs []routerbench.Result
		for _, p := range ps {
			// Rotate the policy order every repetition so no policy
			// always runs first (or last) while the host warms up.
			for i := range pols {
				name := pols[(i+rep)%len(pols)]
				pol, c, err := policySpec(name)
				if err != nil {
					return err
				}
				cfg := routerbench.DefaultConfig(pol, p)
				cfg.Replicas, cfg.TimeScale, cfg.Sessions, cfg.SharedPrefix, cfg.PrefixBytes, cfg.LoadFactor = replicas, scale, sessions, shared, prefixBytes, c
				if routerbench.IsHAProxy(pol) {
					cfg.HAProxy = &hp
				}
				r, err := routerbench.RunAgentic(ctx, cfg)
				if err != nil {
					return fmt.Errorf("rep %d %s pressure %g: %w", rep, name, p, err)
				}
				fmt.Fprintf(os.Stderr, "rep %d pressure %-4g %-20s wall %5.1fs  modelled %6.1fs  tok/s %6.0f  hit %5.1f%%  ttft p90 %4.0fms  conv p90 %5.1fs (wall %5.1fs)  per-replica %v  blocks %d  outcomes %v  move turns %v\n",
					rep, p, name, r.Wall.Seconds(), r.Modelled.Seconds(), r.ThroughputModelled, r.HitRate*100, r.TTFT90*1e3, r.Conv90, r.WallConv90, r.PerReplica, r.CacheBlocks, r.Outcomes, r.MoveTurns)
				r.Policy = name // the spec, so variants get their own rows
				rs = append(rs, r)
			}
		}
		all = append(all, rs)
	}
	routerbench.WriteMarkdown(os.Stdout, routerbench.Summarize(all, pols[0]), pols[0])
	return writeJSON(jsonOut, all)
}

// publishCompare runs every (pressure, policy, version rule) cell under
// periodic publishes, the rules interleaved (order rotated) within each
// repetition, and prints the rule comparison.
func publishCompare(ctx context.Context, sessions []workload.Session, shared, replicas int, scale float64, pols, rules []string, pressures string, reps int, pub routerbench.PublishConfig, jsonOut string) error {
	ps, err := floats(pressures)
	if err != nil {
		return fmt.Errorf("-pressures: %w", err)
	}
	if len(rules) == 0 {
		return fmt.Errorf("-version-rules: none given")
	}
	var all [][]routerbench.Result
	for rep := range reps {
		var rs []routerbench.Result
		for _, p := range ps {
			for _, pol := range pols {
				for i := range rules {
					rule := rules[(i+rep)%len(rules)]
					pc := pub
					pc.VersionRule = rule
					cfg := routerbench.DefaultConfig(pol, p)
					cfg.Replicas, cfg.TimeScale, cfg.Sessions, cfg.SharedPrefix, cfg.Publish = replicas, scale, sessions, shared, &pc
					r, err := routerbench.RunAgentic(ctx, cfg)
					if err != nil {
						return fmt.Errorf("rep %d %s %s pressure %g: %w", rep, pol, rule, p, err)
					}
					fmt.Fprintf(os.Stderr, "rep %d pressure %-4g %-20s %-9s publishes %2d  hit %5.1f%%  tok/s %6.0f  conv p90 %5.1fs  per-replica %v  outcomes %v\n",
						rep, p, pol, rule, r.Publishes, r.HitRate*100, r.ThroughputModelled, r.Conv90, r.PerReplica, r.Outcomes)
					rs = append(rs, r)
				}
			}
		}
		all = append(all, rs)
	}
	routerbench.WritePublishMarkdown(os.Stdout, routerbench.SummarizePublish(all, rules[0]), rules[0])
	return writeJSON(jsonOut, all)
}

func writeJSON(path string, v any) error {
	if path == "" {
		return nil
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func overhead(ctx context.Context, clients []int, dur time.Duration, rate float64, reps int, jsonOut string) error {
	cfg := routerbench.DefaultOverheadConfig()
	cfg.Clients, cfg.Duration, cfg.Rate = clients, dur, rate
	fmt.Printf("overhead: trivial backend, router policy %s, %v per measurement, %d repetitions\n", cfg.Policy, dur, reps)
	var all [][]routerbench.OverheadResult
	for rep := range reps {
		rs, err := routerbench.RunOverhead(ctx, cfg)
		if err != nil {
			return fmt.Errorf("rep %d: %w", rep, err)
		}
		for _, r := range rs {
			fmt.Fprintf(os.Stderr, "rep %d %-6s clients %3d rate %5.0f: %6d req  %7.0f req/s  p50 %8v  p99 %8v  errors %d\n",
				rep, r.Target, r.Clients, r.Rate, r.Requests, r.RPS, r.P50, r.P99, r.Errors)
		}
		all = append(all, rs)
	}
	routerbench.WriteOverheadMarkdown(os.Stdout, all)
	return writeJSON(jsonOut, all)
}

// render prints the tables of a -json file again.
func render(mode, path, baseline string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if mode == "publish" {
		var all [][]routerbench.Result
		if err := json.Unmarshal(b, &all); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		base := ""
		if len(all) > 0 && len(all[0]) > 0 {
			base = policy.VersionNewest
		}
		routerbench.WritePublishMarkdown(os.Stdout, routerbench.SummarizePublish(all, base), base)
		return nil
	}
	if mode == "overhead" {
		var all [][]routerbench.OverheadResult
		if err := json.Unmarshal(b, &all); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		routerbench.WriteOverheadMarkdown(os.Stdout, all)
		return nil
	}
	var all [][]routerbench.Result
	if err := json.Unmarshal(b, &all); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for _, rs := range all {
		for i := range rs {
			rs[i].Derive()
		}
	}
	routerbench.WriteMarkdown(os.Stdout, routerbench.Summarize(all, baseline), baseline)
	return nil
}
