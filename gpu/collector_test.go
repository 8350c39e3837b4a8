package gpu

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestCollectorUnavailableExportsOnlyAvailable(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(NewCollector(Unavailable("no NVIDIA driver: test"))); err != nil {
		t.Fatal(err)
	}
	want := `# HELP asyncrl_gpu_available 1 if NVML is loaded and readable on this node, else 0.
# TYPE asyncrl_gpu_available gauge
asyncrl_gpu_available 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 1 {
		t.Fatalf("%d metrics, %v; want exactly 1", n, err)
	}
}

// TestCollectorOnThisMachine: whatever this machine has, the real source
// scrapes without error; without a GPU it is the single 0 gauge.
func TestCollectorOnThisMachine(t *testing.T) {
	src, closeFn := OpenSource()
	defer closeFn()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(src))
	n, err := testutil.GatherAndCount(reg)
	if err != nil {
		t.Fatal(err)
	}
	if !src.Snapshot().Available && n != 1 {
		t.Fatalf("unavailable NVML exported %d metrics, want 1", n)
	}
}

type fakeSource Snapshot

func (f fakeSource) Snapshot() Snapshot { return Snapshot(f) }

func TestCollectorDevices(t *testing.T) {
	src := fakeSource{Available: true, Devices: []Telemetry{
		{Index: 0, UUID: "GPU-a", Name: "NVIDIA H100", Utilization: 0.75, MemoryUtilization: 0.5,
			MemoryUsedBytes: 1 << 30, MemoryTotalBytes: 80 << 30, TemperatureC: 61, PowerW: 312.5, SMClockMHz: 1980, MemClockMHz: 2619},
		{Index: 1, UUID: "GPU-b", Name: "NVIDIA H100", Utilization: 0, MemoryTotalBytes: 80 << 30, MemoryUsedBytes: 0,
			TemperatureC: 30, SMClockMHz: 345, MemClockMHz: 2619, Missing: []string{"power", "utilization"}},
	}}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(src))
	want := `
# HELP asyncrl_gpu_available 1 if NVML is loaded and readable on this node, else 0.
# TYPE asyncrl_gpu_available gauge
asyncrl_gpu_available 1
# HELP asyncrl_gpu_info GPU present, with its name; always 1.
# TYPE asyncrl_gpu_info gauge
asyncrl_gpu_info{gpu="0",name="NVIDIA H100",uuid="GPU-a"} 1
asyncrl_gpu_info{gpu="1",name="NVIDIA H100",uuid="GPU-b"} 1
# HELP asyncrl_gpu_utilization_ratio Fraction of the last sample period in which a kernel was running.
# TYPE asyncrl_gpu_utilization_ratio gauge
asyncrl_gpu_utilization_ratio{gpu="0",uuid="GPU-a"} 0.75
# HELP asyncrl_gpu_memory_utilization_ratio Fraction of the last sample period in which device memory was read or written.
# TYPE asyncrl_gpu_memory_utilization_ratio gauge
asyncrl_gpu_memory_utilization_ratio{gpu="0",uuid="GPU-a"} 0.5
# HELP asyncrl_gpu_memory_used_bytes Device memory in use.
# TYPE asyncrl_gpu_memory_used_bytes gauge
asyncrl_gpu_memory_used_bytes{gpu="0",uuid="GPU-a"} 1.073741824e+09
asyncrl_gpu_memory_used_bytes{gpu="1",uuid="GPU-b"} 0
# HELP asyncrl_gpu_memory_total_bytes Device memory installed.
# TYPE asyncrl_gpu_memory_total_bytes gauge
asyncrl_gpu_memory_total_bytes{gpu="0",uuid="GPU-a"} 8.589934592e+10
asyncrl_gpu_memory_total_bytes{gpu="1",uuid="GPU-b"} 8.589934592e+10
# HELP asyncrl_gpu_temperature_celsius GPU die temperature.
# TYPE asyncrl_gpu_temperature_celsius gauge
asyncrl_gpu_temperature_celsius{gpu="0",uuid="GPU-a"} 61
asyncrl_gpu_temperature_celsius{gpu="1",uuid="GPU-b"} 30
# HELP asyncrl_gpu_power_watts Board power draw.
# TYPE asyncrl_gpu_power_watts gauge
asyncrl_gpu_power_watts{gpu="0",uuid="GPU-a"} 312.5
# HELP asyncrl_gpu_sm_clock_hertz Current SM clock.
# TYPE asyncrl_gpu_sm_clock_hertz gauge
asyncrl_gpu_sm_clock_hertz{gpu="0",uuid="GPU-a"} 1.98e+09
asyncrl_gpu_sm_clock_hertz{gpu="1",uuid="GPU-b"} 3.45e+08
# HELP asyncrl_gpu_memory_clock_hertz Current memory clock.
# TYPE asyncrl_gpu_memory_clock_hertz gauge
asyncrl_gpu_memory_clock_hertz{gpu="0",uuid="GPU-a"} 2.619e+09
asyncrl_gpu_memory_clock_hertz{gpu="1",uuid="GPU-b"} 2.619e+09
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}

// TestInventoryJSON pins the node-metadata wire names.
func TestInventoryJSON(t *testing.T) {
	inv := Inventory{Available: true, Driver: "550.54", Devices: []Device{{Index: 0, UUID: "GPU-a", Name: "H100", MemoryTotalBytes: 80 << 30}}}
	b, err := json.Marshal(inv)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"available":true,"driver":"550.54","devices":[{"index":0,"uuid":"GPU-a","name":"H100","memory_total_bytes":85899345920}]}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	b, _ = json.Marshal(Inventory{Reason: "no NVIDIA driver: x"})
	if string(b) != `{"available":false,"reason":"no NVIDIA driver: x"}` {
		t.Fatalf("unavailable: %s", b)
	}
}
