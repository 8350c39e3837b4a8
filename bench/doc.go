// Package bench holds asyncrl's workloads and benchmarks (`make bench`).
// Results, with the command and machine that produced them, go to
// BENCHMARKS.md. Benchmarks measure; tests assert behaviour.
package bench
