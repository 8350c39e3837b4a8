#!/usr/bin/env bash
# Run on a GPU host: proves that the NCCL data plane loads libnccl.so.2 at
# run time (purego dlopen + ncclGetVersion) and that NIXL's library is found
# when installed, then runs the CPU data-plane tests on that host.
#   transport/dataplane/testdata/gpu_check.sh
# Environment:
#   ASYNCRL_NCCL_LIBRARY  path to libnccl.so.2 when it is not on the loader
#                         path (found automatically in a pip nvidia-nccl-cu12
#                         install when python3 is present).
set -euo pipefail
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
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
echo "nvidia-smi: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
echo "NCCL library: ${ASYNCRL_NCCL_LIBRARY:-libnccl.so.2 (loader path)}"
go test -count=1 -tags gpu -run '^TestNCCLLoads$' -v ./transport/dataplane/nccl/
go test -count=1 ./transport/dataplane/...
