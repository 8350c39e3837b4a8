// Package gpu holds NVML device inventory and telemetry, and loads NCCL/NIXL
// at run time when present. Everything here must build and behave without a
// GPU or driver: NVML's Init is checked before any other call.
package gpu
