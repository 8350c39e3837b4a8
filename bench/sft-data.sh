#!/usr/bin/env bash
# The SFT data path at scale (issue 18): generate a 2^24-token and a
# 2^30-token dataset (64 Arrow shards each, uint16 ids, lengths 16–200,
# ~10^7 rows for the large one), then for each: build the shard indexes,
# stream one epoch through sample → read → FFD pack (8192-token bins, DP
# 8), serial and pipelined, and report tokens/s, CPU time and the
# process's RSS — side by side for sampler block_shuffle (rows read
# through the mapping, pages dropped once per window) and shuffle (global
# Feistel permutation, a pread per row; capped at SFT_SHUFFLE_TOKENS on
# the large dataset to keep the run short).
# Usage: bench/sft-data.sh BIN DIR   (DIR is deleted afterwards; ~2.2 GB)
set -euo pipefail
BIN=${1:?asyncrl binary}
DIR=${2:?scratch directory}
SMALL=${SFT_SMALL_TOKENS:-2^24}
LARGE=${SFT_LARGE_TOKENS:-2^30}
SHUFFLE_TOKENS=${SFT_SHUFFLE_TOKENS:-2^28}
trap 'rm -rf "$DIR"' EXIT
mkdir -p "$DIR"
echo "# $(date -u +%FT%TZ) $(uname -m), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
for size in "$SMALL" "$LARGE"; do
	d="$DIR/$(echo "$size" | tr '^' '_')"
	"$BIN" data generate --tokens "$size" --shards 64 --vocab 32000 --min-len 16 --max-len 200 --seed 1 "$d"
	du -sh "$d"
	rebuild=--rebuild-index
	for sampler in block_shuffle shuffle; do
		cap=()
		if [ "$sampler" = shuffle ] && [ "$size" = "$LARGE" ]; then cap=(--tokens "$SHUFFLE_TOKENS"); fi
		for mode in "" "--pipelined"; do
			echo "## $size tokens, $sampler ${mode:-serial} (load: $(cut -d' ' -f1-3 /proc/loadavg))"
			"$BIN" data bench "$d" $rebuild --budget 8192 --dp 8 --batch 1024 --sampler "$sampler" "${cap[@]}" $mode
			rebuild=
		done
	done
	rm -rf "$d"
done
