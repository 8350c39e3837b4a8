package store

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// corruptOnce appends a stray chunk to the object Put just stored, the
// first time only: the object's chunks then fail its digest, as a chunk
// the client re-sent after a leader election does (NATSConfig.VerifyPuts).
func corruptOnce(t *testing.T, js jetstream.JetStream, bucket string) (func(context.Context, *jetstream.ObjectInfo), *atomic.Int32) {
	var n atomic.Int32
	return func(ctx context.Context, info *jetstream.ObjectInfo) {
		if n.Add(1) > 1 {
			return
		}
		if _, err := js.Publish(ctx, "$O."+bucket+".C."+info.NUID, []byte("a chunk out of place")); err != nil {
			t.Errorf("injecting a chunk: %v", err)
		}
	}, &n
}

func TestNATSVerifyPutsCatchesACorruptObject(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bus, err := natsbus.Connect(ctx, natsbus.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	js, err := jetstream.New(bus.Conn())
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("weights "), 50_000) // 400 kB: several chunks
	open := func(bucket string, verify bool) (*NATS, *atomic.Int32) {
		cfg := DefaultNATSConfig(bucket)
		cfg.Storage = jetstream.MemoryStorage
		cfg.VerifyPuts = verify
		var calls *atomic.Int32
		cfg.afterPut, calls = corruptOnce(t, js, bucket)
		s, err := NewNATS(ctx, bus.Conn(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return s, calls
	}

	// Unchecked, the Put succeeds and every reader fails: the stall the
	// node-loss e2e met.
	plain, _ := open("plain", false)
	if err := PutBytes(ctx, plain, "v6/delta.safetensors", data); err != nil {
		t.Fatalf("unchecked put: %v", err)
	}
	if _, err := ReadAll(ctx, plain, "v6/delta.safetensors"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("reading the corrupt object: %v; want ErrCorrupt", err)
	}

	// Checked, the Put fails with ErrCorrupt, and a Retrying store puts it
	// again: readers get the bytes.
	checked, calls := open("checked", true)
	if err := PutBytes(ctx, checked, "v6/delta.safetensors", data); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("checked put of an object stored corrupt: %v; want ErrCorrupt", err)
	}
	calls.Store(0)
	r, err := NewRetrying(checked, RetryConfig{Attempts: 3, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := PutBytes(ctx, r, "v6/delta.safetensors", data); err != nil {
		t.Fatalf("retried checked put: %v", err)
	}
	if r.Retries() != 1 || calls.Load() != 2 {
		t.Fatalf("retries %d, puts %d; want 1 retry after the corrupt put", r.Retries(), calls.Load())
	}
	got, err := ReadAll(ctx, r, "v6/delta.safetensors")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read after the retried put: %d bytes, %v", len(got), err)
	}
}
