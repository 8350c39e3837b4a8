//go:build linux && !android

package gpu

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const wantReasonPrefix = "no NVIDIA driver: "

// TestOpenLibraryFailures: a missing library and a library that is not NVML
// both give a clear error and leave the process alive; the second would
// crash if nvmlInit were called on it.
func TestOpenLibraryFailures(t *testing.T) {
	cases := []struct{ path, want string }{
		{"/nonexistent/libnvidia-ml.so.1", "/nonexistent/libnvidia-ml.so.1"},
		{"libc.so.6", "libc.so.6 is not an NVML library"},
	}
	for _, c := range cases {
		n, err := OpenLibrary(c.path)
		var ue *UnavailableError
		if n != nil || !errors.As(err, &ue) || !strings.HasPrefix(ue.Reason, wantReasonPrefix) || !strings.Contains(ue.Reason, c.want) {
			t.Errorf("OpenLibrary(%q) = %v, %v; want reason %q… containing %q", c.path, n, err, wantReasonPrefix, c.want)
		}
	}
}

// fakeNVML compiles testdata/fakenvml.c into a shared library with the
// given -D flags and returns its path and the file its calls are logged to.
// It needs a C compiler (the one cgo would use); the package itself does not.
func fakeNVML(t *testing.T, defines ...string) (lib, log string) {
	t.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("no C compiler (%s) to build the fake NVML library: %v", cc, err)
	}
	dir := t.TempDir()
	lib, log = filepath.Join(dir, "libnvidia-ml-fake.so"), filepath.Join(dir, "calls.log")
	args := []string{"-shared", "-fPIC", "-O1", "-o", lib, "-DLOG_PATH=\"" + log + "\""}
	for _, d := range defines {
		args = append(args, "-D"+d)
	}
	out, err := exec.Command(cc, append(args, "testdata/fakenvml.c")...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", cc, args, err, out)
	}
	return lib, log
}

func calls(t *testing.T, log string) []string {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// TestFakeNVML drives the binding against a real shared library with NVML's
// ABI: the inventory leaves out a device NVML cannot open, every reading
// arrives with its unit converted (percent → ratio, mW → W), a reading a
// board does not support is listed as missing rather than reported as 0,
// and Close shuts NVML down once.
func TestFakeNVML(t *testing.T) {
	lib, log := fakeNVML(t)
	n, err := OpenLibrary(lib)
	if err != nil {
		t.Fatal(err)
	}
	const gib = 1 << 30
	wantInv := Inventory{Available: true, Driver: "570.00-fake", Devices: []Device{
		{Index: 0, UUID: "GPU-fake-0000", Name: "Fake H100", MemoryTotalBytes: 80 * gib},
		{Index: 1, UUID: "GPU-fake-0001", Name: "Fake A100", MemoryTotalBytes: 40 * gib},
	}}
	if inv := n.Inventory(); !reflect.DeepEqual(inv, wantInv) {
		t.Fatalf("inventory\n got %+v\nwant %+v", inv, wantInv)
	}
	want := Snapshot{Available: true, Devices: []Telemetry{
		{Index: 0, UUID: "GPU-fake-0000", Name: "Fake H100", Utilization: 0.42, MemoryUtilization: 0.17,
			MemoryUsedBytes: gib, MemoryTotalBytes: 80 * gib, TemperatureC: 55, PowerW: 123.456, SMClockMHz: 1980, MemClockMHz: 2619},
		{Index: 1, UUID: "GPU-fake-0001", Name: "Fake A100",
			MemoryUsedBytes: 2 * gib, MemoryTotalBytes: 40 * gib, TemperatureC: 40, SMClockMHz: 1410, MemClockMHz: 1215, Missing: []string{"power"}},
	}}
	if s := n.Snapshot(); !reflect.DeepEqual(s, want) {
		t.Fatalf("snapshot\n got %+v\nwant %+v", s, want)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if s := n.Snapshot(); s.Available || !strings.Contains(s.Reason, "closed") {
		t.Fatalf("snapshot after Close: %+v", s)
	}
	shutdowns := 0
	for _, c := range calls(t, log) {
		if c == "nvmlShutdown" {
			shutdowns++
		}
	}
	if shutdowns != 1 {
		t.Fatalf("nvmlShutdown called %d times, want 1", shutdowns)
	}
}

// TestFakeNVMLInitFails: after a failed nvmlInit nothing else in NVML is
// called (a real driver may crash the process then), and the reason names
// the return code and its cause.
func TestFakeNVMLInitFails(t *testing.T) {
	lib, log := fakeNVML(t, "INIT_RET=9") // NVML_ERROR_DRIVER_NOT_LOADED
	n, err := OpenLibrary(lib)
	var ue *UnavailableError
	if n != nil || !errors.As(err, &ue) || ue.Reason != "no NVIDIA driver: nvmlInit: ERROR_DRIVER_NOT_LOADED (the NVIDIA kernel driver is not running)" {
		t.Fatalf("OpenLibrary = %v, %v", n, err)
	}
	if got := calls(t, log); !reflect.DeepEqual(got, []string{"nvmlInit_v2"}) {
		t.Fatalf("NVML calls after a failed init: %v, want only nvmlInit_v2", got)
	}
}

// TestFakeNVMLMissingFunction: a library without one reading's function
// (an old driver, or a new one that dropped a deprecated call) still opens;
// that reading is listed as missing on every device.
func TestFakeNVMLMissingFunction(t *testing.T) {
	lib, _ := fakeNVML(t, "OMIT_TEMPERATURE")
	n, err := OpenLibrary(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	s := n.Snapshot()
	if !s.Available || len(s.Devices) != 2 {
		t.Fatalf("snapshot %+v", s)
	}
	for _, d := range s.Devices {
		if d.Has("temperature") || d.TemperatureC != 0 || !d.Has("memory") {
			t.Errorf("device %d: %+v, want temperature missing and memory read", d.Index, d)
		}
	}
}
