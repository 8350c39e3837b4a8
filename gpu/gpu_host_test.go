//go:build gpu && cgo

package gpu

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestGPUHost runs only with -tags gpu, on a machine with an NVIDIA driver:
// it prints the inventory and a telemetry snapshot and requires at least
// one device with a UUID and memory, and the collector to export it.
func TestGPUHost(t *testing.T) {
	inv := Probe()
	b, _ := json.MarshalIndent(inv, "", "  ")
	t.Logf("inventory:\n%s", b)
	if !inv.Available || len(inv.Devices) == 0 {
		t.Fatalf("no GPU found: %+v", inv)
	}
	for _, d := range inv.Devices {
		if d.UUID == "" || d.Name == "" || d.MemoryTotalBytes == 0 {
			t.Errorf("device %d incomplete: %+v", d.Index, d)
		}
	}
	n, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	s := n.Snapshot()
	b, _ = json.MarshalIndent(s, "", "  ")
	t.Logf("snapshot:\n%s", b)
	if !s.Available || len(s.Devices) != len(inv.Devices) {
		t.Fatalf("snapshot %+v does not match the inventory", s)
	}
	for _, d := range s.Devices {
		if !d.Has("memory") || d.MemoryTotalBytes == 0 || d.MemoryUsedBytes > d.MemoryTotalBytes {
			t.Errorf("device %d memory reading: %+v", d.Index, d)
		}
		if d.Has("utilization") && (d.Utilization < 0 || d.Utilization > 1) {
			t.Errorf("device %d utilization %v outside [0,1]", d.Index, d.Utilization)
		}
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(n))
	want := "# HELP asyncrl_gpu_available 1 if NVML is loaded and readable on this node, else 0.\n# TYPE asyncrl_gpu_available gauge\nasyncrl_gpu_available 1\n"
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "asyncrl_gpu_available"); err != nil {
		t.Error(err)
	}
	if c, err := testutil.GatherAndCount(reg, "asyncrl_gpu_memory_total_bytes"); err != nil || c != len(inv.Devices) {
		t.Errorf("asyncrl_gpu_memory_total_bytes series = %d, %v; want %d", c, err, len(inv.Devices))
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if s := n.Snapshot(); s.Available {
		t.Error("snapshot after Close still available")
	}
}
