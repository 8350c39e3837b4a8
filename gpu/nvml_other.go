//go:build !linux || android

package gpu

// reasonNotLinux: NVML is loaded on Linux only (the hosts asyncrl's GPU
// engines and trainers run on).
const reasonNotLinux = "unavailable: NVML is loaded on Linux only"

// NVML is an open NVML library. Off Linux it cannot be opened.
type NVML struct{}

// Open always fails off Linux.
func Open() (*NVML, error) { return nil, &UnavailableError{Reason: reasonNotLinux} }

// OpenLibrary always fails off Linux.
func OpenLibrary(path string) (*NVML, error) { return Open() }

// Inventory reports the reason.
func (n *NVML) Inventory() Inventory { return Inventory{Reason: reasonNotLinux} }

// Snapshot reports the reason.
func (n *NVML) Snapshot() Snapshot { return Snapshot{Reason: reasonNotLinux} }

// Close does nothing.
func (n *NVML) Close() error { return nil }
