package rawio

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// pair returns a connected loopback TCP pair: the client end wrapped.
func pair(t *testing.T) (*Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	srv := <-acc
	if srv == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); srv.Close() })
	rc := New(c)
	if supported && rc.rc == nil {
		t.Fatal("a TCP connection should use raw calls on this platform")
	}
	return rc, srv
}

func TestReadWriteRoundTrip(t *testing.T) {
	c, srv := pair(t)
	msg := []byte("hello over raw calls")
	if n, err := c.Write(msg); err != nil || n != len(msg) {
		t.Fatalf("Write = %d, %v", n, err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(srv, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("peer read %q, %v", got, err)
	}
	go func() { _, _ = srv.Write([]byte("answer")); srv.Close() }()
	all, err := io.ReadAll(c)
	if err != nil || string(all) != "answer" {
		t.Fatalf("ReadAll = %q, %v (want the answer, then a clean EOF)", all, err)
	}
	if n, err := c.Read(make([]byte, 4)); n != 0 || err != io.EOF {
		t.Fatalf("Read after EOF = %d, %v", n, err)
	}
}

// A Write larger than the socket buffers waits for the peer to drain
// them (EAGAIN, then the poller) and loses nothing.
func TestLargeWriteWaitsForRoom(t *testing.T) {
	c, srv := pair(t)
	big := make([]byte, 16<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	got := make(chan []byte, 1)
	go func() {
		time.Sleep(20 * time.Millisecond) // let the buffers fill first
		b, _ := io.ReadAll(io.LimitReader(srv, int64(len(big))))
		got <- b
	}()
	for _, w := range []func([]byte) (int, error){c.Write, c.WriteAwait} {
		if n, err := w(big); err != nil || n != len(big) {
			t.Fatalf("write = %d, %v", n, err)
		}
		if b := <-got; !bytes.Equal(b, big) {
			t.Fatalf("peer got %d bytes, not the %d written", len(b), len(big))
		}
		go func() {
			b, _ := io.ReadAll(io.LimitReader(srv, int64(len(big))))
			got <- b
		}()
	}
}

// WriteAwait returns only once the connection is readable: after the
// peer answered, not when the write is done.
func TestWriteAwaitWaitsForTheAnswer(t *testing.T) {
	c, srv := pair(t)
	release := make(chan struct{})
	go func() {
		req := make([]byte, 3)
		_, _ = io.ReadFull(srv, req)
		<-release
		_, _ = srv.Write(append([]byte("re:"), req...))
	}()
	done := make(chan error, 1)
	go func() {
		_, err := c.WriteAwait([]byte("abc"))
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("WriteAwait returned (%v) before the peer answered", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != "re:abc" {
		t.Fatalf("Read = %q, %v", buf[:n], err)
	}
}

// A deadline that ends WriteAwait's wait is not its error (the write
// succeeded); the next Read reports it.
func TestWriteAwaitDeadline(t *testing.T) {
	c, srv := pair(t)
	if err := c.c.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteAwait([]byte("ping")); err != nil {
		t.Fatalf("WriteAwait = %v, want nil (the write was done)", err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(srv, got); err != nil || string(got) != "ping" {
		t.Fatalf("peer read %q, %v", got, err)
	}
	_, err := c.Read(make([]byte, 1))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read = %v, want the deadline", err)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Read error %v is not a net.Error timeout", err)
	}
}

// Closing the connection unblocks a waiting Read with net.ErrClosed, as
// it does net.Conn's.
func TestCloseUnblocksRead(t *testing.T) {
	c, _ := pair(t)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	_ = c.c.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Read = %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Read still blocked after Close")
	}
}

// A write to a connection the peer reset fails with the errno inside a
// *net.OpError, as net.Conn's does.
func TestWriteAfterPeerResetFails(t *testing.T) {
	c, srv := pair(t)
	_ = srv.(*net.TCPConn).SetLinger(0)
	_ = srv.Close() // RST
	time.Sleep(20 * time.Millisecond)
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, err = c.Write([]byte("x"))
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "write" {
		t.Fatalf("Write after reset = %v, want a write *net.OpError", err)
	}
}

// A connection that is not a syscall.Conn uses its own Read and Write.
func TestFallbackForOtherConns(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	c := New(a)
	if c.rc != nil {
		t.Fatal("net.Pipe has no descriptor")
	}
	go func() {
		buf := make([]byte, 2)
		_, _ = io.ReadFull(b, buf)
		_, _ = b.Write(buf)
	}()
	if _, err := c.WriteAwait([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "hi" {
		t.Fatalf("read back %q, %v", buf, err)
	}
}

// A message bufio flushed partly before FlushAwait may be answered
// before its last write (a replica rejecting a large request early):
// FlushAwait must not wait then.
func TestFlushAwaitAfterPartialWriteDoesNotWait(t *testing.T) {
	c, srv := pair(t)
	w := &Writer{C: c}
	b := bufio.NewWriterSize(w, 16)
	_, _ = b.WriteString("01")
	_, _ = b.Write([]byte("23456789abcdefXYZ")) // 16 bytes leave now, 3 stay
	if _, err := io.ReadFull(srv, make([]byte, 16)); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Write([]byte("early answer")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	_ = c.c.SetReadDeadline(time.Now().Add(2 * time.Second))
	start := time.Now()
	if err := w.FlushAwait(b); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("FlushAwait waited %v with the answer already in", d)
	}
}
