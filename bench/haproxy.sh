#!/usr/bin/env bash
# The router's HTTP hop against HAProxy 2.6, side by side (issue 22;
# BENCHMARKS.md "Router vs HAProxy"). Installs haproxy and wrk with apt-get
# when missing, builds asyncrl and bench/cmd/hopbench, then hopbench
# starts two trivial Go backends, HAProxy (one thread; a stick table on
# X-Session-ID + leastconn, and a consistent hash on the header: config
# rendered from bench/haproxy/haproxy.cfg.tmpl into a temp dir) and
# `asyncrl router` (sticky_least_loaded, and consistent_hash), and runs wrk
# (bench/haproxy/session.lua: a small completions request with a session
# header) against each target and straight at a backend, interleaved,
# 10 s cells at 1/16/64/256 connections; it prints req/s, latency added
# over direct (p50/p99) and the proxy's CPU seconds per 10^5 requests.
# Usage: bench/haproxy.sh [hopbench run flags…]   e.g. -reps 1 -duration 3s
#        HOPBENCH_BASE=path/to/older/asyncrl bench/haproxy.sh -targets direct,haproxy_stick,router_base,router
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v haproxy >/dev/null || ! command -v wrk >/dev/null; then
	apt-get install -y haproxy wrk >/dev/null || { apt-get update >/dev/null && apt-get install -y haproxy wrk >/dev/null; }
fi
# The package may start a system haproxy; the benchmark uses its own.
OUT=${HOPBENCH_OUT:-$(mktemp -d)}
go build -o "$OUT/asyncrl" ./cmd/asyncrl
go build -o "$OUT/hopbench" ./bench/cmd/hopbench
base=()
if [ -n "${HOPBENCH_BASE:-}" ]; then base=(-asyncrl-base "$HOPBENCH_BASE"); fi
echo "# $(date -u +%FT%TZ) $(uname -m), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg); $(haproxy -v | head -1)"
"$OUT/hopbench" run -asyncrl "$OUT/asyncrl" -haproxy "$(command -v haproxy)" -wrk "$(command -v wrk)" "${base[@]}" "$@"
