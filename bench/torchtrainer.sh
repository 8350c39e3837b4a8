#!/usr/bin/env bash
# Trainer backends side by side (issue 14): `asyncrl run` on gridwalk with the
# built-in trainer and with the PyTorch worker over the worker bridge
# (examples/torch-trainer.yaml), the same config otherwise, interleaved per
# seed (builtin s1, torch s1, builtin s2, …) so machine load hits both alike.
# Prints reward first 5 → last 5, wall time, wall time per step and the
# trainer's own time per step (train_seconds, publish_seconds of summary.json).
#
#   bench/torchtrainer.sh                 # seeds 1 2 3, 30 steps
#   SEEDS="1 2 3 4 5" STEPS=30 bench/torchtrainer.sh
#
# Run from anywhere; it cds to the repository root (the example's
# PYTHONPATH=integrations/torch is relative to it). Needs /usr/bin/python3 with
# torch, numpy and cbor2. Data and reports go to a temp dir (KEEP=1 keeps it).
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS=${SEEDS:-"1 2 3"}
STEPS=${STEPS:-30}
PY=${PYTHON:-/usr/bin/python3}
BIN=${BIN:-bin/asyncrl}
[ -n "${NOBUILD:-}" ] || make build >/dev/null
"$PY" -c 'import torch, numpy, cbor2' || { echo "torchtrainer.sh: $PY lacks torch, numpy or cbor2" >&2; exit 1; }
T=$(mktemp -d "${TMPDIR:-/tmp}/asyncrl-torchbench.XXXXXX")
[ -n "${KEEP:-}" ] || trap 'rm -rf "$T"' EXIT

# The example with the data dir moved to $T; "builtin" is the same file with
# trainer.backend builtin (the exec keys are then unused).
for b in torch builtin; do
	{
		echo "run:"
		echo "  id: bench-$b"
		echo "  data_dir: $T/data-$b"
		sed -n '/^trainer:/,$p' examples/torch-trainer.yaml | grep -v '^\s*#'
	} >"$T/$b.yaml"
done
sed -i 's/^  backend: exec$/  backend: builtin/' "$T/builtin.yaml"

for s in $SEEDS; do
	for b in builtin torch; do
		echo "seed $s $b …" >&2
		rm -rf "$T/data-$b"
		"$BIN" run --config "$T/$b.yaml" --steps "$STEPS" --seed "$s" --report "$T/rep-$b-$s" \
			--log-format json --log-level warn >"$T/log-$b-$s" 2>&1 ||
			{ echo "run $b seed $s failed; log: $T/log-$b-$s" >&2; tail -20 "$T/log-$b-$s" >&2; KEEP=1; trap - EXIT; exit 1; }
	done
done

"$PY" - "$T" "$SEEDS" <<'PY'
import json, sys, statistics as st
d, seeds = sys.argv[1], sys.argv[2].split()
rows = {}
print("| seed | backend | reward first5 → last5 | wall s | s/step | train s/step | publish s/step |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for s in seeds:
    for b in ("builtin", "torch"):
        j = json.load(open(f"{d}/rep-{b}-{s}/summary.json"))
        n = max(j["steps"], 1)
        tr = sum(r.get("train_seconds", 0) for r in j["per_step"]) / n
        pu = sum(r.get("publish_seconds", 0) for r in j["per_step"]) / n
        r = (j["reward_first5"], j["reward_last5"], j["wall_seconds"], j["wall_seconds"] / n, tr, pu)
        rows.setdefault(b, []).append(r)
        print(f"| {s} | {b} | {r[0]:.3f} → {r[1]:.3f} | {r[2]:.1f} | {r[3]:.3f} | {r[4]:.4f} | {r[5]:.4f} |")
m = {b: [st.mean(c) for c in zip(*v)] for b, v in rows.items()}
for b in ("builtin", "torch"):
    r = m[b]
    print(f"| mean | {b} | {r[0]:.3f} → {r[1]:.3f} | {r[2]:.1f} | {r[3]:.3f} | {r[4]:.4f} | {r[5]:.4f} |")
gb, gt = m["builtin"][1] - m["builtin"][0], m["torch"][1] - m["torch"][0]
print()
print(f"reward gain (last5 − first5): builtin {gb:+.3f}, torch {gt:+.3f} (torch/builtin {gt / gb if gb else float('nan'):.2f})")
print(f"wall time per step: torch/builtin {m['torch'][3] / m['builtin'][3]:.2f}; "
      f"train time per step: torch/builtin {m['torch'][4] / m['builtin'][4] if m['builtin'][4] else float('nan'):.1f}")
PY
