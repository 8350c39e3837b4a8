package gpu

import (
	"errors"
	"strings"
	"testing"
)

// TestProbeWithoutGPU: on a machine without a driver Probe reports why and
// does not crash; Open returns an error matching ErrUnavailable.
func TestProbeWithoutGPU(t *testing.T) {
	inv := Probe()
	if inv.Available {
		t.Skipf("NVML available here (%d devices); the gpu-tagged test covers this host", len(inv.Devices))
	}
	if !strings.HasPrefix(inv.Reason, wantReasonPrefix) || len(inv.Devices) != 0 {
		t.Fatalf("Probe() = %+v, want a reason starting %q", inv, wantReasonPrefix)
	}
	t.Logf("reason: %s", inv.Reason)
	n, err := Open()
	if n != nil || !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), wantReasonPrefix) {
		t.Fatalf("Open() = %v, %v", n, err)
	}
	// Probing again is as safe as the first time (nothing half-initialised).
	if again := Probe(); again.Reason != inv.Reason {
		t.Fatalf("second Probe: %+v", again)
	}
	src, closeFn := OpenSource()
	if s := src.Snapshot(); s.Available || s.Reason != inv.Reason {
		t.Fatalf("OpenSource snapshot: %+v", s)
	}
	if err := closeFn(); err != nil {
		t.Fatal(err)
	}
}
