package dataplane_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"go.uber.org/goleak"

	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport/dataplane"
	"github.com/asyncrl/asyncrl/transport/dataplane/nccl"
	"github.com/asyncrl/asyncrl/transport/dataplane/nixl"
	"github.com/asyncrl/asyncrl/transport/dataplane/tcp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// On a host without NCCL and NIXL (this one: no GPU, no libraries) a
// preference for them ends on TCP, the skip reasons carry the dlopen
// errors, and the picked backend moves the bytes.
func TestUnavailableGPUBackendsFallBackToTCP(t *testing.T) {
	nc, _ := nccl.New(nccl.Config{Library: "libnccl-asyncrl-missing.so.2"})
	nx, _ := nixl.New(nixl.Config{Library: "libnixl-asyncrl-missing.so"})
	tb, err := tcp.New(tcp.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	reg := dataplane.NewRegistry(nc, nx, tb)
	b, skipped, err := reg.Pick("nixl", "nccl")
	if err != nil {
		t.Fatal(err)
	}
	if b.Name() != "tcp" || len(skipped) != 2 || skipped[0].Name != "nixl" || skipped[1].Name != "nccl" {
		t.Fatalf("picked %s after %v, want tcp after nixl and nccl", b.Name(), skipped)
	}
	for _, s := range skipped {
		if !errors.Is(s.Reason, dataplane.ErrUnavailable) {
			t.Fatalf("skip reason %v does not wrap ErrUnavailable", s.Reason)
		}
	}

	src := make(dataplane.Buffer, 3<<20)
	for i := range src {
		src[i] = byte(i * 7)
	}
	p := &messages.TransferPlan{TransferID: "fallback", Ranges: dataplane.SplitRanges("w", int64(len(src)), 1<<20)}
	if err := dataplane.Checksum(src, p.Ranges, dataplane.XXH3); err != nil {
		t.Fatal(err)
	}
	o, err := b.Publish(context.Background(), p, src)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	p.URI = o.URI()
	dst := make(dataplane.Buffer, len(src))
	if _, err := b.Fetch(context.Background(), p, dst); err != nil || !bytes.Equal(dst, src) {
		t.Fatalf("fetch over the fallback: %v", err)
	}
}
