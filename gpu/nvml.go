//go:build linux && !android

package gpu

import (
	"fmt"
	"strconv"
	"sync"

	"github.com/ebitengine/purego"
)

// DefaultLibrary is the NVML library Open loads.
const DefaultLibrary = "libnvidia-ml.so.1"

// NVML is an open NVML library. It is safe for concurrent use.
type NVML struct {
	mu     sync.Mutex
	lib    *nvmlLib // nil after Close
	reason string   // why lib is nil
	inv    Inventory
	devs   []uintptr // nvmlDevice_t handles, by Inventory.Devices index
}

// Open loads DefaultLibrary and initialises NVML.
func Open() (*NVML, error) { return OpenLibrary(DefaultLibrary) }

// OpenLibrary loads the NVML library at path and initialises it. Any
// failure gives an *UnavailableError, and after a failed Init nothing else
// in NVML is called (not even Shutdown or ErrorString).
func OpenLibrary(path string) (*NVML, error) {
	lib, err := loadNVML(path)
	if err != nil {
		return nil, &UnavailableError{Reason: "no NVIDIA driver: " + err.Error()}
	}
	if ret := lib.init(); ret != nvmlSuccess {
		lib.close()
		return nil, &UnavailableError{Reason: "no NVIDIA driver: nvmlInit: " + returnName(ret)}
	}
	n := &NVML{lib: lib}
	if err := n.readInventory(); err != nil {
		lib.shutdown()
		lib.close()
		return nil, err
	}
	return n, nil
}

// readInventory lists the devices once: indices, UUIDs and names do not
// change while the driver is loaded.
func (n *NVML) readInventory() error {
	var count uint32
	if ret := n.lib.deviceGetCount(&count); ret != nvmlSuccess {
		return &UnavailableError{Reason: "nvmlDeviceGetCount: " + returnName(ret)}
	}
	inv := Inventory{Available: true}
	if s, ret := n.lib.text(func(b *byte, l uint32) int32 { return n.lib.systemGetDriverVersion(b, l) }); ret == nvmlSuccess {
		inv.Driver = s
	}
	for i := uint32(0); i < count; i++ {
		var d uintptr
		if ret := n.lib.deviceGetHandleByIndex(i, &d); ret != nvmlSuccess {
			// A device the driver lists but cannot open (lost, or not
			// permitted) is left out rather than failing the whole node.
			continue
		}
		dev := Device{Index: int(i)}
		if s, ret := n.lib.text(func(b *byte, l uint32) int32 { return n.lib.deviceGetUUID(d, b, l) }); ret == nvmlSuccess {
			dev.UUID = s
		}
		if s, ret := n.lib.text(func(b *byte, l uint32) int32 { return n.lib.deviceGetName(d, b, l) }); ret == nvmlSuccess {
			dev.Name = s
		}
		var m nvmlMemory
		if ret := n.lib.deviceGetMemoryInfo(d, &m); ret == nvmlSuccess {
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

// Snapshot reads every device now.
func (n *NVML) Snapshot() Snapshot {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.lib == nil {
		return Snapshot{Reason: n.reason}
	}
	s := Snapshot{Available: true}
	for i, d := range n.devs {
		s.Devices = append(s.Devices, n.lib.telemetry(n.inv.Devices[i], d))
	}
	return s
}

func (l *nvmlLib) telemetry(dev Device, d uintptr) Telemetry {
	t := Telemetry{Index: dev.Index, UUID: dev.UUID, Name: dev.Name, MemoryTotalBytes: dev.MemoryTotalBytes}
	miss := func(f string) { t.Missing = append(t.Missing, f) }
	var u nvmlUtilization
	if ret := l.deviceGetUtilizationRates(d, &u); ret == nvmlSuccess {
		t.Utilization, t.MemoryUtilization = float64(u.GPU)/100, float64(u.Memory)/100
	} else {
		miss("utilization")
	}
	var m nvmlMemory
	if ret := l.deviceGetMemoryInfo(d, &m); ret == nvmlSuccess {
		t.MemoryUsedBytes, t.MemoryTotalBytes = m.Used, m.Total
	} else {
		miss("memory")
	}
	var v uint32
	if ret := l.deviceGetTemperature(d, nvmlTemperatureGPU, &v); ret == nvmlSuccess {
		t.TemperatureC = float64(v)
	} else {
		miss("temperature")
	}
	if ret := l.deviceGetPowerUsage(d, &v); ret == nvmlSuccess {
		t.PowerW = float64(v) / 1000 // NVML reports milliwatts
	} else {
		miss("power")
	}
	if ret := l.deviceGetClockInfo(d, nvmlClockSM, &v); ret == nvmlSuccess {
		t.SMClockMHz = float64(v)
	} else {
		miss("sm_clock")
	}
	if ret := l.deviceGetClockInfo(d, nvmlClockMem, &v); ret == nvmlSuccess {
		t.MemClockMHz = float64(v)
	} else {
		miss("mem_clock")
	}
	return t
}

// Close shuts NVML down; later calls report "closed".
func (n *NVML) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.lib == nil {
		return nil
	}
	lib := n.lib
	n.lib, n.reason = nil, "unavailable: NVML closed"
	if ret := lib.shutdown(); ret != nvmlSuccess {
		// NVML may still hold state: leave the library mapped.
		return fmt.Errorf("gpu: nvmlShutdown: %s", returnName(ret))
	}
	lib.close()
	return nil
}

// nvmlLib is libnvidia-ml bound with purego: dlopen and dlsym at run time,
// no cgo and no NVML header at build time (so a build compiles no C and
// prints nothing; go-nvml, used before, compiled NVML's whole header
// through cgo and printed ~150 lines of its deprecation warnings). Every
// call goes through a symbol of this handle, never the global namespace,
// so a library that lacks a function answers ERROR_FUNCTION_NOT_FOUND
// instead of jumping to an unresolved symbol.
//
// The prototypes, structs and constants are NVML's (nvml.h, NVML API 13,
// as shipped in github.com/NVIDIA/go-nvml v0.13.4-1 pkg/nvml/nvml.h):
// nvmlReturn_t and the enums are C ints, nvmlDevice_t is a pointer.
type nvmlLib struct {
	handle uintptr

	init                      func() int32                                   // nvmlInit_v2(void)
	shutdown                  func() int32                                   // nvmlShutdown(void)
	deviceGetCount            func(count *uint32) int32                      // nvmlDeviceGetCount_v2(unsigned int *)
	deviceGetHandleByIndex    func(i uint32, dev *uintptr) int32             // nvmlDeviceGetHandleByIndex_v2(unsigned int, nvmlDevice_t *)
	systemGetDriverVersion    func(buf *byte, n uint32) int32                // nvmlSystemGetDriverVersion(char *, unsigned int)
	deviceGetUUID             func(d uintptr, buf *byte, n uint32) int32     // nvmlDeviceGetUUID(nvmlDevice_t, char *, unsigned int)
	deviceGetName             func(d uintptr, buf *byte, n uint32) int32     // nvmlDeviceGetName(nvmlDevice_t, char *, unsigned int)
	deviceGetMemoryInfo       func(d uintptr, m *nvmlMemory) int32           // nvmlDeviceGetMemoryInfo(nvmlDevice_t, nvmlMemory_t *)
	deviceGetUtilizationRates func(d uintptr, u *nvmlUtilization) int32      // nvmlDeviceGetUtilizationRates(nvmlDevice_t, nvmlUtilization_t *)
	deviceGetTemperature      func(d uintptr, sensor int32, v *uint32) int32 // nvmlDeviceGetTemperature(nvmlDevice_t, nvmlTemperatureSensors_t, unsigned int *)
	deviceGetPowerUsage       func(d uintptr, mw *uint32) int32              // nvmlDeviceGetPowerUsage(nvmlDevice_t, unsigned int *)
	deviceGetClockInfo        func(d uintptr, typ int32, mhz *uint32) int32  // nvmlDeviceGetClockInfo(nvmlDevice_t, nvmlClockType_t, unsigned int *)
}

// nvmlMemory is nvmlMemory_t: total, free, used, in bytes.
type nvmlMemory struct{ Total, Free, Used uint64 }

// nvmlUtilization is nvmlUtilization_t: percent of the last sample period.
type nvmlUtilization struct{ GPU, Memory uint32 }

// NVML constants (nvml.h).
const (
	nvmlSuccess              = 0
	nvmlErrorUninitialized   = 1
	nvmlErrorNotSupported    = 3
	nvmlErrorNoPermission    = 4
	nvmlErrorDriverNotLoaded = 9
	nvmlErrorLibraryNotFound = 12
	nvmlErrorFunctionMissing = 13 // NVML_ERROR_FUNCTION_NOT_FOUND
	nvmlErrorGPUIsLost       = 15
	nvmlErrorLibRMMismatch   = 18 // NVML_ERROR_LIB_RM_VERSION_MISMATCH
	nvmlErrorUnknown         = 999

	nvmlTemperatureGPU = 0 // NVML_TEMPERATURE_GPU
	nvmlClockSM        = 1 // NVML_CLOCK_SM
	nvmlClockMem       = 2 // NVML_CLOCK_MEM

	// nvmlTextBuffer holds any string NVML returns: the v2 UUID and name
	// buffers are 96 bytes, the driver version's 80.
	nvmlTextBuffer = 96
)

// loadNVML dlopens path and binds the functions asyncrl calls. The four a
// device list needs are required (a library without them is not NVML);
// a reading the library lacks answers ERROR_FUNCTION_NOT_FOUND and lands
// in Telemetry.Missing.
func loadNVML(path string) (*nvmlLib, error) {
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, err
	}
	l := &nvmlLib{handle: h}
	required := []struct {
		fn   any
		name string
	}{
		{&l.init, "nvmlInit_v2"},
		{&l.shutdown, "nvmlShutdown"},
		{&l.deviceGetCount, "nvmlDeviceGetCount_v2"},
		{&l.deviceGetHandleByIndex, "nvmlDeviceGetHandleByIndex_v2"},
	}
	for _, f := range required {
		sym, err := purego.Dlsym(h, f.name)
		if err != nil {
			_ = purego.Dlclose(h)
			return nil, fmt.Errorf("%s is not an NVML library: %w", path, err)
		}
		purego.RegisterFunc(f.fn, sym)
	}
	l.bindOptional()
	return l, nil
}

// bindOptional binds each reading to its symbol, or to a function that
// answers ERROR_FUNCTION_NOT_FOUND when the library lacks it (an older
// driver, or a newer one that dropped a deprecated call).
func (l *nvmlLib) bindOptional() {
	if !l.sym(&l.systemGetDriverVersion, "nvmlSystemGetDriverVersion") {
		l.systemGetDriverVersion = func(*byte, uint32) int32 { return nvmlErrorFunctionMissing }
	}
	devText := func(uintptr, *byte, uint32) int32 { return nvmlErrorFunctionMissing }
	if !l.sym(&l.deviceGetUUID, "nvmlDeviceGetUUID") {
		l.deviceGetUUID = devText
	}
	if !l.sym(&l.deviceGetName, "nvmlDeviceGetName") {
		l.deviceGetName = devText
	}
	if !l.sym(&l.deviceGetMemoryInfo, "nvmlDeviceGetMemoryInfo") {
		l.deviceGetMemoryInfo = func(uintptr, *nvmlMemory) int32 { return nvmlErrorFunctionMissing }
	}
	if !l.sym(&l.deviceGetUtilizationRates, "nvmlDeviceGetUtilizationRates") {
		l.deviceGetUtilizationRates = func(uintptr, *nvmlUtilization) int32 { return nvmlErrorFunctionMissing }
	}
	if !l.sym(&l.deviceGetTemperature, "nvmlDeviceGetTemperature") {
		l.deviceGetTemperature = func(uintptr, int32, *uint32) int32 { return nvmlErrorFunctionMissing }
	}
	if !l.sym(&l.deviceGetPowerUsage, "nvmlDeviceGetPowerUsage") {
		l.deviceGetPowerUsage = func(uintptr, *uint32) int32 { return nvmlErrorFunctionMissing }
	}
	if !l.sym(&l.deviceGetClockInfo, "nvmlDeviceGetClockInfo") {
		l.deviceGetClockInfo = func(uintptr, int32, *uint32) int32 { return nvmlErrorFunctionMissing }
	}
}

// sym binds fn (a pointer to a func variable matching the C prototype)
// to name; false when the library does not export it.
func (l *nvmlLib) sym(fn any, name string) bool {
	s, err := purego.Dlsym(l.handle, name)
	if err != nil {
		return false
	}
	purego.RegisterFunc(fn, s)
	return true
}

// text calls an NVML function that fills a char buffer and returns the
// string up to its NUL.
func (l *nvmlLib) text(call func(buf *byte, n uint32) int32) (string, int32) {
	var buf [nvmlTextBuffer]byte
	if ret := call(&buf[0], uint32(len(buf))); ret != nvmlSuccess {
		return "", ret
	}
	for i, b := range buf {
		if b == 0 {
			return string(buf[:i]), nvmlSuccess
		}
	}
	return string(buf[:]), nvmlSuccess
}

// close unmaps the library; only after a successful shutdown, or when
// init never succeeded.
func (l *nvmlLib) close() { _ = purego.Dlclose(l.handle) }

// returnName names an NVML return code without calling into NVML (after a
// failed Init, nvmlErrorString is an NVML call too).
func returnName(r int32) string {
	switch r {
	case nvmlErrorUninitialized:
		return "ERROR_UNINITIALIZED"
	case nvmlErrorNoPermission:
		return "ERROR_NO_PERMISSION (no access to /dev/nvidia*)"
	case nvmlErrorDriverNotLoaded:
		return "ERROR_DRIVER_NOT_LOADED (the NVIDIA kernel driver is not running)"
	case nvmlErrorLibraryNotFound:
		return "ERROR_LIBRARY_NOT_FOUND (" + DefaultLibrary + " not found)"
	case nvmlErrorFunctionMissing:
		return "ERROR_FUNCTION_NOT_FOUND (driver too old for this call)"
	case nvmlErrorLibRMMismatch:
		return "ERROR_LIB_RM_VERSION_MISMATCH (NVML library and kernel driver versions differ; reboot or reload the driver)"
	case nvmlErrorGPUIsLost:
		return "ERROR_GPU_IS_LOST"
	case nvmlErrorNotSupported:
		return "ERROR_NOT_SUPPORTED"
	case nvmlErrorUnknown:
		return "ERROR_UNKNOWN"
	default:
		return "NVML return code " + strconv.Itoa(int(r))
	}
}
