#!/usr/bin/env bash
# Run on a GPU host: prints the NVML inventory and a telemetry snapshot and
# fails unless at least one device is found and exported as metrics.
#   gpu/testdata/check.sh        (from anywhere inside the repository)
set -euo pipefail
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
CGO_ENABLED=1 go test -count=1 -tags gpu -run '^TestGPUHost$' -v ./gpu/
