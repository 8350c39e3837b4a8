// Package routerbench measures asyncrl's router end to end: routing
// policies compared on the 40-turn agentic workload (RunAgentic), and the
// latency the proxy adds in front of a trivial backend (RunOverhead).
//
// Contract: every run starts its own real parts on 127.0.0.1:0 — built-in
// engines (engine.New with a HashModel, real HTTP) behind the real proxy
// (proxy.New) — drives them with real HTTP clients, and stops everything
// before it returns, whatever happened. Runs take a context; cancelling
// it ends the run with its error. Nothing here asserts a speed: it
// measures and returns numbers, and the program bench/cmd/routerbench
// prints them as the tables in BENCHMARKS.md.
//
// Time: engines sleep their modelled step durations × TimeScale, so a
// 40-turn workload fits in tens of seconds. Figures marked "modelled" come
// from the engines' own modelled clocks (engine Stats.Now: the sum of
// step durations) and histograms (vllm:time_to_first_token_seconds), so
// they do not depend on how busy the shared host is; wall-clock figures
// are divided by TimeScale to be comparable and carry the host's noise.
package routerbench
