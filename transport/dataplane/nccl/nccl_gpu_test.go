//go:build gpu

package nccl

import (
	"errors"
	"os"
	"testing"

	"github.com/asyncrl/asyncrl/transport/dataplane"
)

// TestNCCLLoads runs on GPU hosts (bench/gpu/check.sh): the library must
// load and report a version, and Available must still refuse transfers.
func TestNCCLLoads(t *testing.T) {
	cfg := DefaultConfig()
	if p := os.Getenv("ASYNCRL_NCCL_LIBRARY"); p != "" {
		cfg.Library = p
	}
	b, _ := New(cfg)
	v, err := b.Version()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("loaded %s: NCCL %s (code %d)", cfg.Library, FormatVersion(v), v)
	if v < 20000 {
		t.Fatalf("version code %d: not an NCCL 2.x library", v)
	}
	if err := b.Available(); !errors.Is(err, dataplane.ErrNotImplemented) {
		t.Fatalf("Available: %v, want not implemented once loaded", err)
	}
}
