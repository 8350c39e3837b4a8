package store

import (
	"errors"
	"io"
	"testing"
	"time"
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
