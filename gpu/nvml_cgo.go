//go:build cgo

package gpu

import (
	"fmt"
	"strconv"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/dl"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// DefaultLibrary is the NVML library Open loads.
const DefaultLibrary = "libnvidia-ml.so.1"

// NVML is an open NVML library. It is safe for concurrent use.
type NVML struct {
	mu     sync.Mutex
	lib    nvml.Interface // nil after Close or after a panic inside NVML
	reason string         // why lib is nil
	inv    Inventory
	devs   []nvml.Device // handles, by Index
}

// Open loads DefaultLibrary and initialises NVML.
func Open() (*NVML, error) { return OpenLibrary(DefaultLibrary) }

// OpenLibrary loads the NVML library at path and initialises it. Any
// failure gives an *UnavailableError, and after a failed Init nothing else
// in NVML is called (not even Shutdown or ErrorString).
func OpenLibrary(path string) (n *NVML, err error) {
	defer func() {
		if r := recover(); r != nil {
			n, err = nil, &UnavailableError{Reason: fmt.Sprintf("no NVIDIA driver: panic while loading %s: %v", path, r)}
		}
	}()
	// Preflight with our own dlopen: go-nvml resolves NVML's C symbols
	// lazily through the global namespace, so calling nvmlInit from a
	// library that is not NVML would jump to an unresolved symbol and kill
	// the process. Checking the symbol first turns that into an error.
	if err := preflight(path); err != nil {
		return nil, &UnavailableError{Reason: "no NVIDIA driver: " + err.Error()}
	}
	lib := nvml.New(nvml.WithLibraryPath(path))
	if ret := lib.Init(); ret != nvml.SUCCESS {
		// returnName, not ret.Error(): once the library is loaded, Error()
		// calls nvmlErrorString, an NVML call after a failed Init.
		return nil, &UnavailableError{Reason: fmt.Sprintf("no NVIDIA driver: nvmlInit: %s", returnName(ret))}
	}
	n = &NVML{lib: lib}
	if err := n.readInventory(); err != nil {
		lib.Shutdown()
		return nil, err
	}
	return n, nil
}

func preflight(path string) error {
	lib := dl.New(path, dl.RTLD_LAZY|dl.RTLD_LOCAL)
	if err := lib.Open(); err != nil {
		return err
	}
	defer lib.Close()
	if err := lib.Lookup("nvmlInit_v2"); err != nil {
		return fmt.Errorf("%s is not an NVML library: %w", path, err)
	}
	return nil
}

// readInventory lists the devices once: indices, UUIDs and names do not
// change while the driver is loaded.
func (n *NVML) readInventory() error {
	count, ret := n.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return &UnavailableError{Reason: "nvmlDeviceGetCount: " + returnName(ret)}
	}
	inv := Inventory{Available: true}
	if v, ret := n.lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		inv.Driver = v
	}
	for i := 0; i < count; i++ {
		d, ret := n.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			// A device the driver lists but cannot open (lost, or not
			// permitted) is left out rather than failing the whole node.
			continue
		}
		dev := Device{Index: i}
		if s, ret := d.GetUUID(); ret == nvml.SUCCESS {
			dev.UUID = s
		}
		if s, ret := d.GetName(); ret == nvml.SUCCESS {
			dev.Name = s
		}
		if m, ret := d.GetMemoryInfo(); ret == nvml.SUCCESS {
			dev.MemoryTotalBytes = m.Total
		}
		inv.Devices = append(inv.Devices, dev)
		n.devs = append(n.devs, d)
	}
	n.inv = inv
	return nil
}

// Inventory returns the devices found at Open.
func (n *NVML) Inventory() Inventory {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.lib == nil {
		return Inventory{Reason: n.reason}
	}
	inv := n.inv
	inv.Devices = append([]Device(nil), n.inv.Devices...)
	return inv
}

// Snapshot reads every device now. A panic inside NVML (a driver gone bad)
// marks this NVML unavailable instead of taking the process down with the
// scrape.
func (n *NVML) Snapshot() (s Snapshot) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.lib == nil {
		return Snapshot{Reason: n.reason}
	}
	defer func() {
		if r := recover(); r != nil {
			n.lib, n.reason = nil, fmt.Sprintf("unavailable: NVML panicked: %v", r)
			s = Snapshot{Reason: n.reason}
		}
	}()
	s.Available = true
	for i, d := range n.devs {
		s.Devices = append(s.Devices, readTelemetry(n.inv.Devices[i], d))
	}
	return s
}

func readTelemetry(dev Device, d nvml.Device) Telemetry {
	t := Telemetry{Index: dev.Index, UUID: dev.UUID, Name: dev.Name, MemoryTotalBytes: dev.MemoryTotalBytes}
	miss := func(f string) { t.Missing = append(t.Missing, f) }
	if u, ret := d.GetUtilizationRates(); ret == nvml.SUCCESS {
		t.Utilization, t.MemoryUtilization = float64(u.Gpu)/100, float64(u.Memory)/100
	} else {
		miss("utilization")
	}
	if m, ret := d.GetMemoryInfo(); ret == nvml.SUCCESS {
		t.MemoryUsedBytes, t.MemoryTotalBytes = m.Used, m.Total
	} else {
		miss("memory")
	}
	if v, ret := d.GetTemperature(nvml.TEMPERATURE_GPU); ret == nvml.SUCCESS {
		t.TemperatureC = float64(v)
	} else {
		miss("temperature")
	}
	if v, ret := d.GetPowerUsage(); ret == nvml.SUCCESS {
		t.PowerW = float64(v) / 1000 // NVML reports milliwatts
	} else {
		miss("power")
	}
	if v, ret := d.GetClockInfo(nvml.CLOCK_SM); ret == nvml.SUCCESS {
		t.SMClockMHz = float64(v)
	} else {
		miss("sm_clock")
	}
	if v, ret := d.GetClockInfo(nvml.CLOCK_MEM); ret == nvml.SUCCESS {
		t.MemClockMHz = float64(v)
	} else {
		miss("mem_clock")
	}
	return t
}

// Close shuts NVML down; later calls report "closed".
func (n *NVML) Close() (err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.lib == nil {
		return nil
	}
	lib := n.lib
	n.lib, n.reason = nil, "unavailable: NVML closed"
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("gpu: nvmlShutdown panicked: %v", r)
		}
	}()
	if ret := lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("gpu: nvmlShutdown: %s", returnName(ret))
	}
	return nil
}

// returnName names an NVML return code without calling into NVML.
func returnName(r nvml.Return) string {
	switch r {
	case nvml.ERROR_UNINITIALIZED:
		return "ERROR_UNINITIALIZED"
	case nvml.ERROR_NO_PERMISSION:
		return "ERROR_NO_PERMISSION (no access to /dev/nvidia*)"
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return "ERROR_DRIVER_NOT_LOADED (the NVIDIA kernel driver is not running)"
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return "ERROR_LIBRARY_NOT_FOUND (" + DefaultLibrary + " not found)"
	case nvml.ERROR_FUNCTION_NOT_FOUND:
		return "ERROR_FUNCTION_NOT_FOUND (driver too old for this call)"
	case nvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return "ERROR_LIB_RM_VERSION_MISMATCH (NVML library and kernel driver versions differ; reboot or reload the driver)"
	case nvml.ERROR_GPU_IS_LOST:
		return "ERROR_GPU_IS_LOST"
	case nvml.ERROR_NOT_SUPPORTED:
		return "ERROR_NOT_SUPPORTED"
	case nvml.ERROR_UNKNOWN:
		return "ERROR_UNKNOWN"
	default:
		return "NVML return code " + strconv.Itoa(int(r))
	}
}
