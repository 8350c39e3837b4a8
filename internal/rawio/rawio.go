// Package rawio reads and writes a socket with raw non-blocking system
// calls, for the router's hot path (issue 22).
//
// Go's net.Conn enters every read and write through the scheduler's
// syscall hooks (entersyscall/exitsyscall). When the process has been
// idle between requests — the usual state of a proxy at low concurrency
// — the first such call wakes the runtime's sysmon thread, which then
// polls every 20 µs until the process is idle again: on a one-connection
// ping-pong through the router that was a third of its CPU, more than the
// parsing, routing and copying together. A read or write on a
// non-blocking socket never blocks, so it needs none of the hooks:
// Conn makes the same calls with syscall.RawSyscall inside the
// connection's own poller (syscall.RawConn), keeping deadlines, Close and
// the read/write locks exactly as net.Conn has them.
//
// WriteAwait writes a request and then waits for the connection to
// become readable without first trying a read that would fail with
// EAGAIN: the answer to what was just written cannot be there before it
// was written, so the write happens after the poller was armed for
// reading, and the next Read finds data. That is one system call fewer
// per exchange. It is only for a peer that speaks in answer (the router's
// replicas): input that arrived before the call is not seen (see
// WriteAwait), so a client that may pipeline or half-close gets plain
// writes.
//
// Off Linux, or for a connection that is not a syscall.Conn, Conn falls
// back to the connection's own Read and Write.
package rawio

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
)

// Conn is a connection read and written with raw system calls. Like a
// net.Conn it allows one reader and one writer at a time, concurrently.
type Conn struct {
	c  net.Conn
	rc syscall.RawConn // nil: the fallback
	// The state of the read (rd: Read, WriteAwait) and of the write (wr:
	// Write) in progress, and their callbacks bound once: closures over
	// locals escaped, two allocations per call.
	rd, wr                   op
	readFn, writeFn, awaitFn func(uintptr) bool
}

type op struct {
	p     []byte
	n     int
	err   error
	wrote bool // WriteAwait: p is written, waiting to be readable
}

// New wraps c; Read and Write act on c's descriptor.
func New(c net.Conn) *Conn {
	rc := &Conn{c: c}
	if supported {
		if sc, ok := c.(syscall.Conn); ok {
			if raw, err := sc.SyscallConn(); err == nil {
				rc.rc = raw
				rc.readFn, rc.writeFn, rc.awaitFn = rc.read, rc.write, rc.await
			}
		}
	}
	return rc
}

// Read reads as net.Conn.Read does: it waits for data, returns io.EOF
// at the end, and the connection's deadline applies.
func (c *Conn) Read(p []byte) (int, error) {
	if c.rc == nil {
		return c.c.Read(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	c.rd = op{p: p}
	rerr := c.rc.Read(c.readFn)
	n, err := c.rd.n, c.rd.err
	c.rd = op{}
	if rerr != nil {
		return 0, opError("read", c.c, rerr)
	}
	if err != nil && err != io.EOF {
		return 0, opError("read", c.c, err)
	}
	return n, err
}

func (c *Conn) read(fd uintptr) bool {
	n, again, err := readFD(fd, c.rd.p)
	c.rd.n, c.rd.err = n, err
	return !again
}

// Write writes all of p as net.Conn.Write does, waiting while the
// socket's buffer is full.
func (c *Conn) Write(p []byte) (int, error) {
	if c.rc == nil {
		return c.c.Write(p)
	}
	c.wr = op{p: p}
	werr := c.rc.Write(c.writeFn)
	n, err := c.wr.n, c.wr.err
	c.wr = op{}
	if werr == nil {
		werr = err
	}
	if werr != nil {
		return n, opError("write", c.c, werr)
	}
	return n, nil
}

// write writes o.p from o.n on; false: the buffer is full (wait).
func (o *op) write(fd uintptr) bool {
	for o.n < len(o.p) {
		m, again, e := writeFD(fd, o.p[o.n:])
		if again {
			return false
		}
		if e != nil {
			o.err = e
			return true
		}
		o.n += m
	}
	return true
}

func (c *Conn) write(fd uintptr) bool { return c.wr.write(fd) }

// WriteAwait writes all of p, then waits until the connection is
// readable (data, end or error), so that the next Read does not start
// with a failed read. Only the write's error is returned: a deadline or
// close that ends the wait shows on the next Read. It holds the read
// side (no concurrent Read) and writes without the write lock, so the
// caller must not write concurrently either.
//
// Nothing may be readable before p is written (the peer speaks only in
// answer to p): RawRead's prepareRead resets the poller's readiness
// (runtime_pollReset), and the callback writes without reading, so data
// or an EOF that arrived earlier is not seen until the next edge — the
// wait then lasts until a deadline or close.
func (c *Conn) WriteAwait(p []byte) (int, error) {
	if c.rc == nil {
		return c.c.Write(p)
	}
	c.rd = op{p: p}
	_ = c.rc.Read(c.awaitFn)
	o := c.rd
	c.rd = op{}
	switch {
	case o.err != nil:
		return o.n, opError("write", c.c, o.err)
	case !o.wrote: // the wait could not start, or the buffer filled
		m, werr := c.Write(p[o.n:])
		return o.n + m, werr
	}
	return o.n, nil
}

func (c *Conn) await(fd uintptr) bool {
	o := &c.rd
	if o.wrote {
		return true // woken: readable (or a spurious wake; Read copes)
	}
	if !o.write(fd) || o.err != nil {
		return true // the buffer is full (WriteAwait finishes with Write), or failed
	}
	o.wrote = true
	return false // armed before the write: wait for the answer
}

// opError wraps err as net.Conn's methods do: a poller error (deadline,
// closed) is already a *net.OpError; an errno becomes an
// *os.SyscallError inside one.
func opError(op string, c net.Conn, err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) {
		return err
	}
	if errno, ok := err.(syscall.Errno); ok {
		err = os.NewSyscallError(op, errno)
	}
	return &net.OpError{Op: op, Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// Writer writes to a Conn; FlushAwait makes a bufio.Writer's flush over
// it a WriteAwait.
type Writer struct {
	C     *Conn
	await bool
	// wrote: part of the message left in a plain Write since the last
	// FlushAwait (bufio flushed a full buffer), so the peer may already
	// have answered; FlushAwait then writes plainly.
	wrote bool
}

func (w *Writer) Write(p []byte) (int, error) {
	if w.await {
		w.await = false
		if !w.wrote {
			return w.C.WriteAwait(p)
		}
	}
	w.wrote = true
	return w.C.Write(p)
}

// FlushAwait flushes b, which writes to w, and then waits until the
// connection is readable (WriteAwait). When b holds nothing it only
// returns b's error.
func (w *Writer) FlushAwait(b *bufio.Writer) error {
	w.await = true
	err := b.Flush()
	w.await, w.wrote = false, false
	return err
}
