//go:build !cgo

package gpu

// reasonNoCgo is the reason when the binary was built with CGO_ENABLED=0:
// go-nvml needs cgo to dlopen libnvidia-ml.
const reasonNoCgo = "unavailable: built without cgo"

// NVML is an open NVML library. In a build without cgo it cannot be opened.
type NVML struct{}

// Open always fails in a build without cgo.
func Open() (*NVML, error) { return nil, &UnavailableError{Reason: reasonNoCgo} }

// OpenLibrary always fails in a build without cgo.
func OpenLibrary(path string) (*NVML, error) { return Open() }

// Inventory reports the reason.
func (n *NVML) Inventory() Inventory { return Inventory{Reason: reasonNoCgo} }

// Snapshot reports the reason.
func (n *NVML) Snapshot() Snapshot { return Snapshot{Reason: reasonNoCgo} }

// Close does nothing.
func (n *NVML) Close() error { return nil }
