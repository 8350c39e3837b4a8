package nixl

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/transport/dataplane"
)

func TestMissingLibraryIsUnavailable(t *testing.T) {
	b, err := New(Config{Library: "libnixl-asyncrl-missing.so"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Available(); !errors.Is(err, dataplane.ErrUnavailable) || !strings.Contains(err.Error(), "dlopen libnixl-asyncrl-missing.so") {
		t.Fatalf("Available: %v, want ErrUnavailable carrying the dlopen error", err)
	}
}

// With a loadable core library (libc stands in) and a shim lacking the
// symbols, Load reports what is missing and Available still refuses.
func TestProbeReportsMissingShimSymbols(t *testing.T) {
	b, _ := New(Config{Library: "libc.so.6", ShimLibrary: "libm.so.6"})
	p, err := b.Load()
	if err != nil {
		t.Skipf("no libc/libm here: %v", err)
	}
	if p.Shim != "libm.so.6" || len(p.Missing) != len(ShimSymbols) {
		t.Fatalf("probe %+v, want every shim symbol missing", p)
	}
	err = b.Available()
	if !errors.Is(err, dataplane.ErrUnavailable) || !errors.Is(err, dataplane.ErrNotImplemented) || !strings.Contains(err.Error(), "nixl_capi_create_agent") {
		t.Fatalf("Available: %v", err)
	}
	b2, _ := New(Config{Library: "libc.so.6", ShimLibrary: "libnixl_capi-missing.so"})
	if p, _ := b2.Load(); p.Shim != "" || !strings.Contains(p.ShimError, "dlopen") {
		t.Fatalf("probe %+v, want the shim's dlopen error", p)
	}
}

func TestTransfersNotImplemented(t *testing.T) {
	b, _ := New(DefaultConfig())
	if _, err := b.Publish(context.Background(), nil, nil); !errors.Is(err, dataplane.ErrNotImplemented) {
		t.Fatal(err)
	}
	if _, err := b.Fetch(context.Background(), nil, nil); !errors.Is(err, dataplane.ErrNotImplemented) {
		t.Fatal(err)
	}
}
