#!/usr/bin/env bash
# The SFT data path at scale (issue 18): generate a 2^24-token and a
# 2^30-token dataset (64 Arrow shards each, uint16 ids, lengths 16–200,
# ~10^7 rows for the large one), then for each: build the shard indexes,
# stream one shuffled epoch through sample → read → FFD pack (8192-token
# bins, DP 8) and report tokens/s, CPU time and the process's RSS.
# Usage: bench/sft-data.sh BIN DIR   (DIR is deleted afterwards; ~2.2 GB)
set -euo pipefail
BIN=${1:?asyncrl binary}
DIR=${2:?scratch directory}
SMALL=${SFT_SMALL_TOKENS:-2^24}
LARGE=${SFT_LARGE_TOKENS:-2^30}
trap 'rm -rf "$DIR"' EXIT
mkdir -p "$DIR"
echo "# $(date -u +%FT%TZ) $(uname -m), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
for size in "$SMALL" "$LARGE"; do
	d="$DIR/$(echo "$size" | tr '^' '_')"
	"$BIN" data generate --tokens "$size" --shards 64 --vocab 32000 --min-len 16 --max-len 200 --seed 1 "$d"
	du -sh "$d"
	for mode in "" "--pipelined"; do
		echo "## $size tokens ${mode:-serial} (load: $(cut -d' ' -f1-3 /proc/loadavg))"
		"$BIN" data bench "$d" --rebuild-index --budget 8192 --dp 8 --batch 1024 $mode
	done
	rm -rf "$d"
done
