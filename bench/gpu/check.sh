#!/usr/bin/env bash
# Run on a GPU host (from anywhere inside the repository):
#   bench/gpu/check.sh
# It prints the GPU inventory and a telemetry snapshot (NVML, gpu/), proves
# the NCCL data plane loads libnccl.so.2 at run time (purego dlopen +
# ncclGetVersion), probes NIXL's libraries, runs the CPU data-plane tests on
# this host and the weight-sync model. Every step runs; the exit status is
# non-zero if any required step failed (NIXL is optional: reported, not
# required).
# Environment:
#   ASYNCRL_NCCL_LIBRARY   path to libnccl.so.2 when it is not on the loader
#                          path (found automatically in a pip
#                          nvidia-nccl-cu12 install when python3 is present)
#   ASYNCRL_NIXL_LIBRARY   path to libnixl.so (default: the loader path, then
#                          /opt/nvidia/nvda_nixl/lib/x86_64-linux-gnu)
#   ASYNCRL_DATAPLANE_1GIB=1  run the two-process transfers at 1 GiB
set -uo pipefail
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)" || exit 2
failed=()
step() { # step NAME required|optional CMD...
  local name=$1 need=$2; shift 2
  echo "=== $name"
  if "$@"; then echo "--- $name: ok"; return; fi
  if [[ $need == required ]]; then failed+=("$name"); echo "--- $name: FAILED"; else echo "--- $name: unavailable (optional)"; fi
}

if [[ -z "${ASYNCRL_NCCL_LIBRARY:-}" ]] && ! ldconfig -p 2>/dev/null | grep -q 'libnccl.so.2'; then
  cand=$(python3 - <<'PY' 2>/dev/null || true
import glob, os, site
for d in site.getsitepackages() + [site.getusersitepackages()]:
    for p in glob.glob(os.path.join(d, "nvidia", "nccl", "lib", "libnccl.so.2")):
        print(p); raise SystemExit
PY
)
  if [[ -n "$cand" ]]; then export ASYNCRL_NCCL_LIBRARY="$cand"; fi
fi
if [[ -z "${ASYNCRL_NIXL_LIBRARY:-}" ]] && ! ldconfig -p 2>/dev/null | grep -q 'libnixl.so'; then
  for d in /opt/nvidia/nvda_nixl/lib/x86_64-linux-gnu /opt/nvidia/nvda_nixl/lib; do
    if [[ -e $d/libnixl.so ]]; then export ASYNCRL_NIXL_LIBRARY="$d/libnixl.so"; break; fi
  done
fi
echo "host: $(hostname), $(nproc) CPUs, $(go version)"
echo "nvidia-smi: $(nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>&1 | paste -sd';')"
echo "NCCL library: ${ASYNCRL_NCCL_LIBRARY:-libnccl.so.2 (loader path)}"
echo "NIXL library: ${ASYNCRL_NIXL_LIBRARY:-libnixl.so (loader path)}"

step "GPU inventory and telemetry (NVML)" required env CGO_ENABLED=1 go test -count=1 -tags gpu -run '^TestGPUHost$' -v ./gpu/
step "NCCL loads at run time" required go test -count=1 -tags gpu -run '^TestNCCLLoads$' -v ./transport/dataplane/nccl/
step "NIXL probe" optional go test -count=1 -tags gpu -run '^TestNIXLLoads$' -v ./transport/dataplane/nixl/
step "CPU data planes (tcp, shm, two processes)" required go test -count=1 -v -run 'TwoProcess' ./transport/dataplane/
step "all data-plane tests" required go test -count=1 ./transport/dataplane/...
step "weight-sync model (Qwen3-235B)" required go run ./cmd/asyncrl bench weightsync-plan --model qwen3-235b-a22b --trainer tp4,pp2,ep8 --inference dp16,ep16

if ((${#failed[@]})); then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
echo "all required steps passed"
