package store

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A reader that stops delivering (an object-store consumer on a server
// that died) is closed after the idle timeout: the blocked Read ends with
// ErrStalled instead of waiting for its context's deadline. A reader that
// keeps delivering is never cut, however long it takes in all.
func TestIdleReaderEndsAStalledRead(t *testing.T) {
	pr, pw := io.Pipe()
	r := newIdleReader(pr, 100*time.Millisecond, "get k")
	defer r.Close()
	go func() {
		for range 5 { // 5 writes 50 ms apart: 250 ms in all, never idle 100 ms
			_, _ = pw.Write([]byte("x"))
			time.Sleep(50 * time.Millisecond)
		}
		// then silence: the writer stays open, as a stuck consumer does
	}()
	buf := make([]byte, 1)
	for i := range 5 {
		if n, err := r.Read(buf); n != 1 || err != nil {
			t.Fatalf("read %d: %d bytes, %v; want a byte (the stream is alive)", i, n, err)
		}
	}
	start := time.Now()
	_, err := r.Read(buf)
	if !errors.Is(err, ErrStalled) {
		t.Fatalf("read after the stream went silent: %v; want ErrStalled", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the stalled read ended after %s; want about the idle timeout", d)
	}
	_ = pw.Close()
}

func TestIdleReaderPassesEOF(t *testing.T) {
	pr, pw := io.Pipe()
	r := newIdleReader(pr, time.Minute, "get k")
	defer r.Close()
	go func() { _, _ = pw.Write([]byte("ab")); _ = pw.Close() }()
	b, err := io.ReadAll(r)
	if err != nil || string(b) != "ab" {
		t.Fatalf("ReadAll = %q, %v; want ab", b, err)
	}
}

// silentOS is an object store whose Get is never answered until its
// context ends: a consumer-create request that reached a server as it died.
type silentOS struct{ jetstream.ObjectStore }

func (silentOS) Get(ctx context.Context, _ string, _ ...jetstream.GetObjectOpt) (jetstream.ObjectResult, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// A Get that gets no answer ends after OpenTimeout with ErrStalled (which
// a Retrying store tries again), not at the caller's deadline; the
// caller's own cancellation stays final.
func TestGetWithoutAnswerStalls(t *testing.T) {
	n := &NATS{os: silentOS{}, cfg: NATSConfig{OpenTimeout: 50 * time.Millisecond}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	_, err := n.Get(ctx, "k")
	if !errors.Is(err, ErrStalled) || time.Since(start) > 10*time.Second {
		t.Fatalf("Get = %v after %s; want ErrStalled after the open timeout", err, time.Since(start))
	}
	if final(ctx, err) {
		t.Errorf("a stalled open is final for Retrying; want it retried")
	}
	dead, stop := context.WithCancel(context.Background())
	stop()
	if _, err := n.Get(dead, "k"); errors.Is(err, ErrStalled) || !final(dead, err) {
		t.Errorf("Get on an ended context = %v; want the context's error, final", err)
	}
}
