package dataplane_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport/dataplane"
	"github.com/asyncrl/asyncrl/transport/dataplane/nccl"
	"github.com/asyncrl/asyncrl/transport/dataplane/nixl"
	"github.com/asyncrl/asyncrl/transport/dataplane/tcp"
)

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

// The receiver's backend follows the plan's URI, and Receive turns the
// outcome into the control message to publish.
func TestReceiveByURI(t *testing.T) {
	tb, err := tcp.New(tcp.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	nc, _ := nccl.New(nccl.Config{Library: "libnccl-asyncrl-missing.so.2"})
	reg := dataplane.NewRegistry(tb, nc)
	for uri, want := range map[string]string{"tcp://127.0.0.1:1/x": "tcp", "nccl://abc": "nccl"} {
		if b, err := reg.ForURI(uri); err != nil || b.Name() != want {
			t.Errorf("ForURI(%s) = %v, %v; want %s", uri, b, err, want)
		}
	}
	if _, err := reg.ForURI("shm:///dev/shm/x"); !errors.Is(err, dataplane.ErrUnavailable) {
		t.Errorf("unregistered scheme: %v", err)
	}
	if _, err := reg.ForURI("no-scheme"); !errors.Is(err, dataplane.ErrBadPlan) {
		t.Errorf("no scheme: %v", err)
	}

	src := make(dataplane.Buffer, 2<<20)
	for i := range src {
		src[i] = byte(i * 3)
	}
	p := &messages.TransferPlan{Header: messages.Header{RunID: "r", Version: 4}, TransferID: "recv",
		Ranges: dataplane.SplitRanges("w", int64(len(src)), 1<<20)}
	dataplane.Checksum(src, p.Ranges, dataplane.XXH3)
	o, err := tb.Publish(context.Background(), p, src)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	p.URI = o.URI()
	dst := make(dataplane.Buffer, len(src))
	done, ok := reg.Receive(context.Background(), p, "engine-3", dst).(messages.TransferDone)
	if !ok || done.Bytes != int64(len(src)) || done.Destination != "engine-3" || done.Version != 4 || !bytes.Equal(dst, src) {
		t.Fatalf("Receive = %v", done)
	}
	// A plan whose range 1 checksum does not match the published bytes
	// (the source must not change bytes while they are published).
	bad := *p
	bad.Ranges = append([]messages.ByteRange(nil), p.Ranges...)
	bad.Ranges[1].Checksum = dataplane.Sum(dataplane.XXH3, []byte("other bytes"))
	failed, ok := reg.Receive(context.Background(), &bad, "engine-3", dst).(messages.TransferFailed)
	if !ok || failed.Range != 1 || !strings.Contains(failed.Reason, "checksum") {
		t.Fatalf("Receive after corruption = %v", failed)
	}
	q := *p
	q.URI = "nccl://abc"
	if f, ok := reg.Receive(context.Background(), &q, "engine-3", dst).(messages.TransferFailed); !ok || f.Range != -1 || !strings.Contains(f.Reason, "not implemented") {
		t.Fatalf("Receive over nccl = %v", f)
	}
}
