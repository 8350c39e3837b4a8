#!/usr/bin/env bash
# Does a real architecture learn? (issue 29; `make example-qwen3` runs it for
# one seed, BENCHMARKS.md "Real architectures learn" for three.) For an
# example pair examples/NAME-tiny-sft.yaml + examples/NAME-tiny.yaml:
#
#  1. guess_chat demonstrations (asyncrl data demos), tokenised with the
#     model's tokenizer and chat template (asyncrl data pretokenize);
#  2. the SFT warm-up (asyncrl sft), once — skipped when its checkpoint
#     exists;
#  3. the RL run once per seed, each in its own data and report directory
#     (the example's paths with /seed-S/), all from the same warm-up;
#  4. a table: reward mean of the first 5 and last 5 steps per seed, the
#     trainer/rollout logprob mismatch, wall time.
#
#   bench/learn.sh NAME [SEED ...]      NAME: qwen3, qwen3-moe or deepseek-v3; STEPS=N overrides run.steps
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:?usage: bench/learn.sh NAME [SEED ...] (NAME: qwen3, qwen3-moe, deepseek-v3)}
shift
seeds=("${@:-1}")
[ ${#seeds[@]} -gt 0 ] || seeds=(1)
rl=examples/$name-tiny.yaml
sft=examples/$name-tiny-sft.yaml
for f in "$rl" "$sft"; do
	[ -f "$f" ] || { echo "bench/learn.sh: $f does not exist" >&2; exit 2; }
done
GO=${GO:-go}
bin=${ASYNCRL_BIN:-}
if [ -z "$bin" ]; then
	bin=$(mktemp -d)/asyncrl
	"$GO" build -o "$bin" ./cmd/asyncrl
fi
[ -d .cache/tokenizers ] || bash .ci/tokenizers

root=runs/$name-tiny
tok=$(sed -n 's/^  tokenizer: //p' "$sft")
mkdir -p "$root"
if [ ! -d "$root/sft-data" ]; then
	"$bin" data demos --task guess_chat --episodes 1000 --seed 1 "$root/demos.jsonl"
	"$bin" data pretokenize --tokenizer "$tok" "$root/demos.jsonl" "$root/sft-data"
fi
if [ ! -e "$root/sft/latest" ]; then
	"$bin" sft --config "$sft"
fi

# shellcheck source=bench/seeds.sh
. bench/seeds.sh
run_seeds "bench/learn.sh: $name" "$bin" "$root" "$rl" "${seeds[@]}"

/usr/bin/python3 - "$name" "$root" "${seeds[@]}" <<'EOF'
import json, statistics, sys
name, root, seeds = sys.argv[1], sys.argv[2], sys.argv[3:]
print(f"\n{name}: guess_chat from the SFT warm-up ({root}/sft), one run per seed")
print("| seed | steps | reward first 5 | reward last 5 | Δ | mismatch median (all / same-version tokens) | wall s |")
print("| ---: | ---: | ---: | ---: | ---: | --- | ---: |")
deltas = []
for s in seeds:
    r = json.load(open(f"{root}/seed-{s}/report/summary.json"))
    ps = r["per_step"]
    mm = statistics.median(p["mismatch"] for p in ps)
    same = [p["mismatch_same_version"] for p in ps if p.get("same_version_tokens")]
    d = r["reward_last5"] - r["reward_first5"]
    deltas.append(d)
    print(f"| {s} | {r['steps']} | {r['reward_first5']:.3f} | {r['reward_last5']:.3f} | {d:+.3f} | "
          f"{mm:.2e} / {statistics.median(same) if same else float('nan'):.2e} | {r['wall_seconds']:.0f} |")
print(f"\nmean Δ over {len(seeds)} seeds: {statistics.mean(deltas):+.3f}")
EOF
