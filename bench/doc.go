// Package bench holds asyncrl's workloads and benchmarks (`make bench`).
// Results, with the command and machine that produced them, go to
// BENCHMARKS.md. Benchmarks measure; tests assert behaviour.
//
// Layout:
//   - bench/workload: seeded, pure generators of the workloads in
//     /work/shared/reference/workloads.md (40-turn agentic, RL groups).
//   - bench/routerbench: the router benchmarks (policy comparison on real
//     built-in engines behind the real proxy; added latency in front of a
//     trivial backend), with the short versions `make bench` runs.
//   - bench/cmd/routerbench: the program that runs the long versions and
//     prints BENCHMARKS.md's tables.
//   - bench/results: raw results (JSON and logs) behind those tables.
package bench
