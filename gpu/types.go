package gpu

import (
	"errors"
	"strings"
)

// ErrUnavailable is matched (errors.Is) by every *UnavailableError.
var ErrUnavailable = errors.New("gpu: NVML unavailable")

// UnavailableError says why NVML cannot be used on this machine.
type UnavailableError struct {
	// Reason is the text users see, e.g. "no NVIDIA driver: libnvidia-ml.so.1:
	// cannot open shared object file" or "unavailable: built without cgo".
	Reason string
}

func (e *UnavailableError) Error() string        { return "gpu: " + e.Reason }
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// Device is one GPU as the inventory lists it.
type Device struct {
	// Index is NVML's device index (what CUDA_VISIBLE_DEVICES counts, when
	// CUDA_DEVICE_ORDER=PCI_BUS_ID).
	Index            int    `json:"index"`
	UUID             string `json:"uuid"`
	Name             string `json:"name"`
	MemoryTotalBytes uint64 `json:"memory_total_bytes"`
}

// Inventory is what a node reports about its GPUs in its metadata.
type Inventory struct {
	Available bool `json:"available"`
	// Reason is set when Available is false.
	Reason string `json:"reason,omitempty"`
	// Driver is the NVIDIA driver version.
	Driver  string   `json:"driver,omitempty"`
	Devices []Device `json:"devices,omitempty"`
}

// Telemetry is one device's readings at one moment.
type Telemetry struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	Name  string `json:"name"`
	// Utilization is the fraction of the last sample period in which a
	// kernel ran (0..1); MemoryUtilization the same for memory traffic.
	Utilization       float64 `json:"utilization"`
	MemoryUtilization float64 `json:"memory_utilization"`
	MemoryUsedBytes   uint64  `json:"memory_used_bytes"`
	MemoryTotalBytes  uint64  `json:"memory_total_bytes"`
	TemperatureC      float64 `json:"temperature_c"`
	PowerW            float64 `json:"power_w"`
	SMClockMHz        float64 `json:"sm_clock_mhz"`
	MemClockMHz       float64 `json:"mem_clock_mhz"`
	// Missing names the fields above NVML could not read on this device
	// ("utilization", "memory", "temperature", "power", "sm_clock",
	// "mem_clock"); their values are zero and must not be exported.
	Missing []string `json:"missing,omitempty"`
}

// Has reports whether field (one of the Missing names) was read.
func (t Telemetry) Has(field string) bool {
	for _, m := range t.Missing {
		if m == field {
			return false
		}
	}
	return true
}

// Snapshot is the telemetry of every device on the node.
type Snapshot struct {
	Available bool        `json:"available"`
	Reason    string      `json:"reason,omitempty"`
	Devices   []Telemetry `json:"devices,omitempty"`
}

// Source is what the collector reads on each scrape. *NVML implements it;
// so does Unavailable.
type Source interface {
	Snapshot() Snapshot
}

// Unavailable is a Source with no NVML, reporting reason.
type Unavailable string

// Snapshot reports the reason.
func (u Unavailable) Snapshot() Snapshot { return Snapshot{Reason: string(u)} }

// Probe opens NVML, reads the inventory and closes it. Without NVML it
// returns an Inventory with Available false and the reason; it never
// panics.
func Probe() Inventory {
	n, err := Open()
	if err != nil {
		return Inventory{Reason: reasonOf(err)}
	}
	defer n.Close()
	return n.Inventory()
}

// OpenSource returns an open *NVML, or an Unavailable source carrying the
// reason: what a node agent hands to NewCollector.
func OpenSource() (Source, func() error) {
	n, err := Open()
	if err != nil {
		return Unavailable(reasonOf(err)), func() error { return nil }
	}
	return n, n.Close
}

func reasonOf(err error) string {
	var ue *UnavailableError
	if errors.As(err, &ue) {
		return ue.Reason
	}
	return strings.TrimPrefix(err.Error(), "gpu: ")
}
