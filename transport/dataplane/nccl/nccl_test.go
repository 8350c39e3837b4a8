package nccl

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/transport/dataplane"
)

func TestMissingLibraryIsUnavailable(t *testing.T) {
	b, err := New(Config{Library: "libnccl-asyncrl-missing.so.2"})
	if err != nil {
		t.Fatal(err)
	}
	err = b.Available()
	if !errors.Is(err, dataplane.ErrUnavailable) || !strings.Contains(err.Error(), "dlopen libnccl-asyncrl-missing.so.2") {
		t.Fatalf("Available: %v, want ErrUnavailable carrying the dlopen error", err)
	}
	if _, err := b.Version(); !errors.Is(err, dataplane.ErrUnavailable) {
		t.Fatalf("Version: %v", err)
	}
}

// A library without ncclGetVersion (libc) loads but fails the symbol probe.
func TestLibraryWithoutSymbolIsUnavailable(t *testing.T) {
	b, _ := New(Config{Library: "libc.so.6"})
	err := b.Available()
	if !errors.Is(err, dataplane.ErrUnavailable) || !strings.Contains(err.Error(), "ncclGetVersion") {
		t.Fatalf("Available: %v, want ErrUnavailable naming ncclGetVersion", err)
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
	if _, err := New(Config{}); err == nil {
		t.Fatal("empty Library accepted")
	}
}

func TestFormatVersion(t *testing.T) {
	for _, tc := range []struct {
		code int
		want string
	}{{22105, "2.21.5"}, {21803, "2.18.3"}, {2708, "2.7.8"}, {30001, "3.0.1"}} {
		if got := FormatVersion(tc.code); got != tc.want {
			t.Errorf("FormatVersion(%d) = %s, want %s", tc.code, got, tc.want)
		}
	}
}
