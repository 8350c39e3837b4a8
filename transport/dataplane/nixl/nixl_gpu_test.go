//go:build gpu

package nixl

import (
	"errors"
	"os"
	"testing"

	"github.com/asyncrl/asyncrl/transport/dataplane"
)

// TestNIXLLoads runs on GPU hosts (bench/gpu/check.sh): when libnixl.so
// is installed it must load, the probe says which shim symbols exist, and
// Available still refuses transfers (not implemented yet). A host without
// NIXL skips: NIXL is optional, NCCL is the required GPU plane.
func TestNIXLLoads(t *testing.T) {
	cfg := DefaultConfig()
	if p := os.Getenv("ASYNCRL_NIXL_LIBRARY"); p != "" {
		cfg.Library = p
	}
	b, _ := New(cfg)
	p, err := b.Load()
	if err != nil {
		t.Skipf("NIXL not installed here: %v", err)
	}
	t.Logf("loaded %s; probe %+v", cfg.Library, p)
	if err := b.Available(); !errors.Is(err, dataplane.ErrUnavailable) && !errors.Is(err, dataplane.ErrNotImplemented) {
		t.Fatalf("Available: %v, want unavailable or not implemented", err)
	}
}
