//go:build cgo

package gpu

import (
	"errors"
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
