#!/usr/bin/env bash
# Trainer backends side by side (issue 14): `asyncrl run` on gridwalk with the
# built-in trainer and with the PyTorch worker over the worker bridge
# (examples/torch-trainer.yaml), the same config otherwise, interleaved per
# seed (builtin s1, torch s1, builtin s2, …) so machine load hits both alike.
# Prints reward first 5 → last 5, wall time, time to step 1, wall time per step
# (all, and steps 2..N) and the trainer's own time per step (train_seconds,
# publish_seconds of summary.json).
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
T=${REPORTS:-$(mktemp -d "${TMPDIR:-/tmp}/asyncrl-torchbench.XXXXXX")}
# REPORTS=DIR: print the table of an earlier KEEP=1 run's temp dir again.
if [ -n "${REPORTS:-}" ]; then T=$REPORTS; SKIP=1; fi
[ -n "${KEEP:-}${REPORTS:-}" ] || trap 'rm -rf "$T"' EXIT

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
	[ -z "${SKIP:-}" ] || break
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
# step 1 at: wall time when step 1 finished (includes starting the trainer:
# the torch child's interpreter and imports); s/step 2..N: the rest of the
# run per step, the steady state; train/publish: the trainer actor's own
# time per step (the backend's Step; publishing the version), means.
cols = ("reward first5 → last5", "wall s", "step 1 at s", "s/step", "s/step 2..N", "train s/step", "publish s/step")
rows = {}
print("| seed | backend | " + " | ".join(cols) + " |")
print("|" + " --- |" * (len(cols) + 2))
fmt = lambda r: f"{r[0]:.3f} → {r[1]:.3f} | {r[2]:.1f} | {r[3]:.1f} | {r[4]:.3f} | {r[5]:.3f} | {r[6]:.3f} | {r[7]:.3f}"
for s in seeds:
    for b in ("builtin", "torch"):
        j = json.load(open(f"{d}/rep-{b}-{s}/summary.json"))
        ps = j["per_step"]
        n = max(len(ps), 1)
        first = ps[0]["elapsed_seconds"] if ps else 0
        r = (j["reward_first5"], j["reward_last5"], j["wall_seconds"], first, j["wall_seconds"] / n,
             (j["wall_seconds"] - first) / max(n - 1, 1),
             sum(x.get("train_seconds", 0) for x in ps) / n, sum(x.get("publish_seconds", 0) for x in ps) / n)
        rows.setdefault(b, []).append(r)
        print(f"| {s} | {b} | {fmt(r)} |")
m = {b: [st.mean(c) for c in zip(*v)] for b, v in rows.items()}
for b in ("builtin", "torch"):
    print(f"| mean | {b} | {fmt(m[b])} |")
gb, gt = m["builtin"][1] - m["builtin"][0], m["torch"][1] - m["torch"][0]
ratio = lambda i: m["torch"][i] / m["builtin"][i] if m["builtin"][i] else float("nan")
print()
print(f"reward gain (last5 − first5): builtin {gb:+.3f}, torch {gt:+.3f} (torch/builtin {gt / gb if gb else float('nan'):.2f})")
print(f"torch/builtin: wall {ratio(2):.2f}, s/step 2..N {ratio(5):.2f}, train s/step {ratio(6):.1f}, publish s/step {ratio(7):.2f}")
PY
