#!/usr/bin/env bash
# SFT (issue 18) side by side: `asyncrl sft` on the same two generated
# "counting" datasets (examples/sft.yaml's) with the built-in trainer and
# with the PyTorch worker over the worker bridge, the same config otherwise,
# interleaved per repetition (builtin r1, torch r1, builtin r2, …) so machine
# load hits both alike. Prints per run the loss first → last, the data
# path's and the trainer's tokens/s (sft-report.json) and the wall time.
#
#   bench/sft.sh                      # 3 repetitions of 30 steps
#   REPS=5 STEPS=50 bench/sft.sh
#   BACKENDS=builtin bench/sft.sh     # without torch
#
# Run from anywhere; it cds to the repository root. The torch runs need
# /usr/bin/python3 with torch, numpy and cbor2. Data and reports go to a temp
# dir (KEEP=1 keeps it).
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-3}
STEPS=${STEPS:-30}
BACKENDS=${BACKENDS:-"builtin torch"}
BIN=${BIN:-bin/asyncrl}
[ -n "${NOBUILD:-}" ] || make build >/dev/null
T=$(mktemp -d "${TMPDIR:-/tmp}/asyncrl-sftbench.XXXXXX")
[ -n "${KEEP:-}" ] || trap 'rm -rf "$T"' EXIT
"$BIN" data generate --tokens 4M --shards 8 --vocab 98 --min-len 16 --max-len 96 --pattern counting --mask "$T/counting" >/dev/null
"$BIN" data generate --tokens 1M --shards 2 --vocab 98 --min-len 16 --max-len 96 --pattern counting --seed 2 "$T/counting-b" >/dev/null
for b in builtin torch; do
	{
		sed -e "s#runs/sft-data/#$T/#; s#runs/sft-report#$T/report-$b#; s#runs/sft#$T/out-$b#" \
			-e "s/^  steps: .*/  steps: $STEPS/" examples/sft.yaml | grep -v '^\s*#'
	} >"$T/$b.yaml"
done
sed -i 's#^  backend: builtin$#  backend: exec\n  exec: ["/usr/bin/python3", "-m", "asyncrl_worker"]\n  exec_env: ["PYTHONPATH=integrations/torch", "OMP_NUM_THREADS=2"]#' "$T/torch.yaml"
printf '%-8s %-4s %-18s %14s %14s %8s\n' backend rep "loss first→last" "data tok/s" "trainer tok/s" wall_s
for r in $(seq "$REPS"); do
	for b in $BACKENDS; do
		rm -rf "$T/out-$b" "$T/report-$b"
		s=$(date +%s.%N)
		"$BIN" sft --config "$T/$b.yaml" --log-level warn >/dev/null 2>&1
		e=$(date +%s.%N)
		python3 - "$T/report-$b/sft-report.json" "$b" "$r" "$(echo "$e - $s" | bc)" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]:<8} {sys.argv[3]:<4} {r['first_loss']:.4f}→{r['last_loss']:.4f}    {r['data_tokens_per_second']:14.0f} {r['train_tokens_per_second']:14.0f} {float(sys.argv[4]):8.1f}")
PY
	done
done
