#!/usr/bin/env bash
# Does the calculator tool environment learn with real tool calls? (issue 33;
# bench/results/tool-env.md.) For examples/tool-env-qwen3-sft.yaml +
# examples/tool-env-qwen3.yaml:
#
#  1. calculator demonstrations with Hermes tool calls answered by the real
#     sandboxed tool (asyncrl data demos --task calculator), tokenised with the
#     Qwen3 tokenizer and chat template (asyncrl data pretokenize);
#  2. the SFT warm-up (asyncrl sft), once — skipped when its checkpoint exists;
#  3. the RL run once per seed, each in its own data and report directory,
#     the seeds side by side (one process each: the table's wall times are
#     under the same load);
#  4. a table from each summary.json: reward first 5 → last 5 steps, the
#     fraction of finished episodes with a well-formed tool call, tool calls,
#     malformed calls, calls cut off at the sandbox's time limit, aborted
#     trajectories by reason, lost trajectories, wall time.
#
#   bench/tool-env.sh [SEED ...]       STEPS=N overrides run.steps
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=("${@:-1}")
GO=${GO:-go}
bin=${ASYNCRL_BIN:-}
if [ -z "$bin" ]; then
	bin=$(mktemp -d)/asyncrl
	"$GO" build -o "$bin" ./cmd/asyncrl
fi
[ -d .cache/tokenizers ] || bash .ci/tokenizers

root=runs/tool-qwen3
rl=examples/tool-env-qwen3.yaml
mkdir -p "$root"
if [ ! -d "$root/sft-data" ]; then
	# 7,500 demonstrations, three seeds' files side by side (each call runs
	# the sandboxed tool: ~2,500 episodes take minutes), then concatenated
	for s in 11 12 13; do
		"$bin" data demos --task calculator --episodes 2500 --seed "$s" "$root/demos-$s.jsonl" &
	done
	wait
	cat "$root"/demos-1[123].jsonl >"$root/demos.jsonl"
	"$bin" data pretokenize --tokenizer .cache/tokenizers/qwen3 "$root/demos.jsonl" "$root/sft-data"
fi
if [ ! -e "$root/sft/step-00000600" ]; then
	"$bin" sft --config examples/tool-env-qwen3-sft.yaml
fi

# shellcheck source=bench/seeds.sh
. bench/seeds.sh
pids=()
for s in "${seeds[@]}"; do
	run_seeds "bench/tool-env.sh" "$bin" "$root" "$rl" "$s" &
	pids+=($!)
done
for p in "${pids[@]}"; do
	wait "$p"
done

/usr/bin/python3 - "$root" "${seeds[@]}" <<'EOF'
import json
import statistics
import sys

root, seeds = sys.argv[1], sys.argv[2:]
print("| seed | steps | reward first 5 | reward last 5 | Δ | generated: first 5 versions | last 5 | Δ | episodes with a well-formed call | tool calls | malformed | timed out | aborted (env error / timeout) | lost | wall s |")
print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |")
deltas, gdeltas, curves = [], [], []
for s in seeds:
    r = json.load(open(f"{root}/seed-{s}/report/summary.json"))
    d = r["reward_last5"] - r["reward_first5"]
    deltas.append(d)
    # reward_generated_*: every group the filter judged, kept or dropped
    # (the trained batches leave out the groups right every time)
    gd = r["reward_generated_last5"] - r["reward_generated_first5"]
    gdeltas.append(gd)
    curves.append((s, r["reward_by_version"]))
    fin = r["trajectories_finished"]
    frac = r["episodes_with_tool_call"] / fin if fin else float("nan")
    print(f"| {s} | {r['steps']} | {r['reward_first5']:.3f} | {r['reward_last5']:.3f} | {d:+.3f} | "
          f"{r['reward_generated_first5']:.3f} | {r['reward_generated_last5']:.3f} | {gd:+.3f} | "
          f"{r['episodes_with_tool_call']}/{fin} = {frac:.2f} | {r['tool_calls']} | {r['tool_calls_malformed']} | "
          f"{r['tool_calls_timed_out']} | {r['trajectories_aborted']} ({r['trajectories_aborted_env_error']} / "
          f"{r['trajectories_aborted_env_timeout']}) | {r['trajectories_lost']} | {r['wall_seconds']:.0f} |")
if deltas:
    print(f"\nmean Δ over {len(seeds)} seeds: trained batches {statistics.mean(deltas):+.3f}, "
          f"everything generated {statistics.mean(gdeltas):+.3f}")
print("\nreward of everything each version generated (version: mean over groups×n):")
for s, rows in curves:
    print(f"seed {s}: " + " ".join(f"v{x['version']} {x['mean']:.3f}/{x['groups']}" for x in rows))
EOF
