#!/usr/bin/env bash
# The delta codec against C zstd (issue 22; BENCHMARKS.md "Delta codec vs C
# zstd"): makes a BF16 checkpoint and its next versions (1 % and 3 % of
# the weights moved by small updates, an Adam-like update of every weight,
# and the 2 % update quantised to FP8 E4M3), writes each tensor's XOR patch
# to a file, then in interleaved rounds compresses them with Debian's zstd
# (-1, -3, -1 -T2; one frame per tensor as Encode makes) and with
# klauspost's encoder (Encode's old and new per-tensor paths and option
# variants), runs delta.Encode, and decodes with `zstd -d` and DecodeAll.
# Prints markdown tables: bytes out, GB per CPU-second, wall GB/s, medians.
# Usage: bench/zstd.sh [DIR]   (DIR is scratch space, deleted afterwards;
# about 1.3 GB at the default size)
# Knobs: ZSTD_BENCH_MB (BF16 checkpoint MiB, 256), ZSTD_BENCH_TENSORS (16),
# ZSTD_BENCH_ROUNDS (5), ZSTD_BENCH_CASES (comma list), GO (go).
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
DIR=${1:-$(mktemp -d)}
if ! command -v zstd >/dev/null 2>&1; then
	echo "zstd is not installed; installing Debian's package" >&2
	SUDO=
	if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
	$SUDO apt-get update -qq
	$SUDO apt-get install -y -qq zstd
fi
BIN=$(mktemp)
trap 'rm -rf "$BIN" "$DIR/zstdbench"' EXIT
"$GO" build -o "$BIN" ./weights/delta/internal/zstdbench
"$BIN" -dir "$DIR/zstdbench" -zstd "$(command -v zstd)" \
	-mb "${ZSTD_BENCH_MB:-256}" -tensors "${ZSTD_BENCH_TENSORS:-16}" -rounds "${ZSTD_BENCH_ROUNDS:-5}" \
	-cases "${ZSTD_BENCH_CASES:-sparse1pct,sparse3pct,adamlike,fp8-sparse2pct}"
