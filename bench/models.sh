#!/usr/bin/env bash
# The real architectures side by side (issue 29; `make bench-models`, not in
# `make test`): on the SAME checkpoint per architecture (`asyncrl model init
# --preset tiny --vocab $VOCAB`), in one run, interleaved architecture by
# architecture and round by round so that load drifts hit both sides alike:
#
#  1. decode: the Go engine's batched KV-cache path (model/transformer
#     BenchmarkDecode -decode.model DIR, GOMAXPROCS=$THREADS) against PyTorch
#     eager with a KV cache (integrations/torch/bench/decode.py --model DIR,
#     torch.set_num_threads($THREADS), OPENBLAS_NUM_THREADS=$THREADS). Both:
#     B prompts of 32 random ids prefilled, then greedy decode, float32
#     compute over the BF16 weights; the figure compared is steady decode
#     tokens/s (prefill excluded: Go B·128/decode time, torch
#     B·(gen−1)/decode time), the median over rounds;
#  2. train: the torch worker's TrainBatch step per architecture
#     (integrations/torch/bench/train_step.py --model DIR: B 4 × n 8 ×
#     (32 prompt + 96 generated) tokens, the SkyRL loss, two checkpoints
#     written per step), tokens/s.
#
#   bench/models.sh [OUT.md]      ARCHS="qwen3 ..." VOCAB=151936 BATCH=1,32 THREADS=1 ROUNDS=3
set -euo pipefail
cd "$(dirname "$0")/.."
ARCHS=${ARCHS:-qwen3 qwen3_moe llama deepseek_v3}
VOCAB=${VOCAB:-151936}
BATCH=${BATCH:-1,32}
THREADS=${THREADS:-1}
ROUNDS=${ROUNDS:-3}
GO=${GO:-go}
PY=${PY:-/usr/bin/python3}
OUT=${1:-bench/results/models.md}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$GO" build -o "$tmp/asyncrl" ./cmd/asyncrl
"$GO" test -c -o "$tmp/transformer.test" ./model/transformer
for a in $ARCHS; do
	"$tmp/asyncrl" model init --arch "$a" --preset tiny --vocab "$VOCAB" --seed 1 --out "$tmp/$a" >/dev/null
done

export OPENBLAS_NUM_THREADS=$THREADS OMP_NUM_THREADS=$THREADS
load0=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq 1 "$ROUNDS"); do
	for a in $ARCHS; do
		echo "round $r/$ROUNDS: $a decode (Go, then torch)" >&2
		GOMAXPROCS=$THREADS "$tmp/transformer.test" -test.run '^$' -test.bench Decode -test.benchtime 2x \
			-decode.model "$tmp/$a" -decode.batch "$BATCH" | grep '^BenchmarkDecode' | sed "s/^/go $a /" >>"$tmp/go.txt"
		"$PY" integrations/torch/bench/decode.py --model "$tmp/$a" --batch "$BATCH" --threads "$THREADS" --repeats 2 \
			| sed "s/^/torch $a /" >>"$tmp/torch.txt"
	done
done
echo "train steps (torch worker)" >&2
for a in $ARCHS; do
	"$PY" integrations/torch/bench/train_step.py --model "$tmp/$a" --threads "$THREADS" --steps 3 | tail -1 | sed "s/^/train $a /" >>"$tmp/train.txt"
done
load1=$(cut -d' ' -f1-3 /proc/loadavg)

"$PY" - "$tmp" "$OUT" "$load0" "$load1" "$THREADS" "$VOCAB" "$ROUNDS" <<'EOF'
import json, re, statistics, sys, platform, subprocess
tmp, out, load0, load1, threads, vocab, rounds = sys.argv[1:]
go, torch = {}, {}
for line in open(f"{tmp}/go.txt"):
    _, arch, rest = line.split(" ", 2)
    b = int(re.search(r"batch=(\d+)", rest).group(1))
    go.setdefault((arch, b), []).append(float(re.search(r"([\d.]+) decode_tok/s", rest).group(1)))
blas = "?"
for line in open(f"{tmp}/torch.txt"):
    _, arch, js = line.split(" ", 2)
    r = json.loads(js)
    blas = r.get("blas", blas)
    torch.setdefault((arch, r["batch"]), []).append(r["decode_tokens_per_s"])
train = []
for line in open(f"{tmp}/train.txt"):
    _, arch, js = line.split(" ", 2)
    train.append((arch, json.loads(js)))
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
rows = [
    f"Measured by `bench/models.sh` ({subprocess.run(['date', '-u', '+%Y-%m-%d'], capture_output=True, text=True).stdout.strip()}), "
    f"{cpu}, {threads} thread(s) per side, vocab {vocab}, tiny preset, {rounds} rounds interleaved; "
    f"load average at start {load0}, at end {load1}; torch BLAS {blas.split(',')[0]}.",
    "",
    "| arch | batch | Go decode tok/s | torch decode tok/s | Go ÷ torch |",
    "| --- | ---: | ---: | ---: | ---: |",
]
for key in sorted(go, key=lambda k: (list(dict.fromkeys(a for a, _ in go)).index(k[0]), k[1])):
    g, t = statistics.median(go[key]), statistics.median(torch.get(key, [float("nan")]))
    rows.append(f"| {key[0]} | {key[1]} | {g:.0f} | {t:.0f} | {g / t:.2f}× |")
rows += ["", "| arch | params | tokens per step | step s | train tokens/s (excl. checkpoints) | tokens/s | peak RSS MiB |",
         "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
for arch, r in train:
    S, L = r["groups"] * r["n"], r["prompt"] + r["gen"]
    rows.append(f"| {arch} | {r['params']:,} | {S * L} | {r['step_s']:.2f} | {r['train_tokens_per_s']:.0f} | "
                f"{r['tokens_per_s']:.0f} | {r.get('peak_rss_mb', 0):.0f} |")
text = "\n".join(rows) + "\n"
print(text)
with open(out, "w") as f:
    f.write("# Real architectures: Go engine vs PyTorch eager decode, torch trainer steps (bench/models.sh)\n\n" + text)
EOF
