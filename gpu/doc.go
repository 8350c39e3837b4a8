// Package gpu holds NVML device inventory and telemetry, device assignment
// for engine and trainer ranks, and (later) run-time loading of NCCL/NIXL.
//
// # Contract
//
// Everything builds and behaves without a GPU or driver:
//
//   - Open loads libnvidia-ml at run time (go-nvml, cgo). It first dlopens the
//     library and checks it exports nvmlInit_v2, then calls nvml.Init and
//     checks the result. If either fails, Open returns an *UnavailableError
//     ("no NVIDIA driver: <reason>") and makes no further NVML call: calling
//     into NVML after a failed Init can kill the process. Panics on the
//     loading path are recovered into the same error.
//   - Built without cgo (CGO_ENABLED=0) the NVML path is compiled out and
//     Open reports "unavailable: built without cgo".
//   - Probe is Open + Inventory + Close in one call, for node metadata.
//
// An open *NVML is safe for concurrent use; Close calls nvml.Shutdown once.
// Readings NVML does not support on a device (power on some boards) are
// listed in Telemetry.Missing rather than reported as zero.
//
// NewCollector exports a Source's Snapshot as Prometheus gauges, read on
// every scrape: asyncrl_gpu_available (always), and per device, labelled
// {gpu="<index>", uuid="<uuid>"}: asyncrl_gpu_info (with name),
// asyncrl_gpu_utilization_ratio, asyncrl_gpu_memory_utilization_ratio,
// asyncrl_gpu_memory_used_bytes, asyncrl_gpu_memory_total_bytes,
// asyncrl_gpu_temperature_celsius, asyncrl_gpu_power_watts,
// asyncrl_gpu_sm_clock_hertz, asyncrl_gpu_memory_clock_hertz. Without NVML
// only asyncrl_gpu_available 0 is exported.
//
// Assign is a pure function from an AssignConfig and a device count to the
// device indices of each engine and trainer rank.
//
// On a GPU host, gpu/testdata/check.sh (or go test -tags gpu ./gpu/) prints
// the inventory and fails unless at least one device is found.
package gpu
