package tcp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport/dataplane"
)

// rangeState is the receiver's progress on one range: the resume point of
// a broken connection.
type rangeState struct {
	done int64 // bytes received, hashed and written
	chk  *dataplane.Checker
}

// fetch is one Fetch call: a queue of ranges shared by its streams.
type fetch struct {
	cfg    Config
	pool   *pool
	addr   string
	id     string
	ranges []messages.ByteRange
	dst    io.WriterAt
	slicer dataplane.Slicer

	mu         sync.Mutex
	pending    []int // range indices not yet taken, front first
	state      []rangeState
	reconnects int
	received   int64
}

// ParseURI splits tcp://host:port/<escaped id>.
func ParseURI(uri string) (addr, id string, err error) {
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "tcp" || u.Host == "" {
		return "", "", fmt.Errorf("%w: URI %q is not tcp://host:port/<id>", dataplane.ErrBadPlan, uri)
	}
	id, err = url.PathUnescape(strings.TrimPrefix(u.EscapedPath(), "/"))
	if err != nil || id == "" {
		return "", "", fmt.Errorf("%w: URI %q has no transfer id", dataplane.ErrBadPlan, uri)
	}
	return u.Host, id, nil
}

func runFetch(ctx context.Context, cfg Config, pl *pool, p *messages.TransferPlan, dst io.WriterAt) (dataplane.Result, error) {
	addr, id, err := ParseURI(p.URI)
	if err != nil {
		return dataplane.Result{}, err
	}
	if _, err := dataplane.ValidateRanges(p.Ranges); err != nil {
		return dataplane.Result{}, err
	}
	f := &fetch{cfg: cfg, pool: pl, addr: addr, id: id, ranges: p.Ranges, dst: dst,
		state: make([]rangeState, len(p.Ranges)), pending: make([]int, len(p.Ranges))}
	f.slicer, _ = dst.(dataplane.Slicer)
	for i, r := range p.Ranges {
		f.pending[i] = i
		f.state[i].chk, _ = dataplane.NewChecker(r.Checksum) // validated above
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for range min(cfg.Streams, len(p.Ranges)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f.stream(ctx); err != nil {
				cancel(err)
			}
		}()
	}
	wg.Wait()
	res := dataplane.Result{Bytes: f.received, Reconnects: f.reconnects}
	if err := context.Cause(ctx); err != nil {
		if errors.Is(err, dataplane.ErrChecksum) || errors.Is(err, dataplane.ErrUnknownTransfer) ||
			errors.Is(err, dataplane.ErrBadPlan) || errors.Is(err, dataplane.ErrIncomplete) {
			return res, err
		}
		return res, fmt.Errorf("%w: transfer %q: %w", dataplane.ErrIncomplete, id, err)
	}
	return res, nil
}

// take hands out the next pending range, or -1 when none is left.
func (f *fetch) take() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.pending) == 0 {
		return -1
	}
	i := f.pending[0]
	f.pending = f.pending[1:]
	return i
}

// requeue puts a range back at the front after a broken connection and
// counts the break against MaxReconnects.
func (f *fetch) requeue(i int, cause error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pending = append([]int{i}, f.pending...)
	f.reconnects++
	if f.reconnects > f.cfg.MaxReconnects {
		return fmt.Errorf("%w: transfer %q: %d broken connections (MaxReconnects %d), last: %w",
			dataplane.ErrIncomplete, f.id, f.reconnects, f.cfg.MaxReconnects, cause)
	}
	f.cfg.Logger.Warn().Err(cause).Str("transfer", f.id).Int("range", i).
		Int64("resume_at", f.ranges[i].Offset+f.state[i].done).Msg("dataplane/tcp: connection broke; resuming")
	return nil
}

// stream runs one connection: take a range, fetch it, repeat; on a broken
// connection requeue the range at its progress and redial. A healthy
// connection goes back to the pool when the queue is empty.
func (f *fetch) stream(ctx context.Context) (err error) {
	var cc *clientConn
	var stop func() bool
	defer func() {
		if cc == nil {
			return
		}
		// stop() is false when the cancel hook already closed the connection.
		if stop() && err == nil {
			f.pool.put(f.addr, cc)
			return
		}
		cc.Close()
	}()
	drop := func() {
		if cc != nil {
			stop()
			cc.Close()
			cc = nil
		}
	}
	backoff := f.cfg.Backoff
	for {
		i := f.take()
		if i < 0 {
			return nil
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		var err error
		if cc == nil {
			cc, err = f.connect(ctx)
			if err == nil {
				// Closing the connection is what interrupts a blocked read
				// when another stream failed or the caller gave up.
				c := cc
				stop = context.AfterFunc(ctx, func() { c.Close() })
			}
		}
		var before int64
		if err == nil {
			before = f.state[i].done
			err = f.fetchRange(cc.Conn, cc.br, i)
			if err == nil {
				backoff = f.cfg.Backoff
				cc.reused = false
				continue
			}
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if f.cfg.ClientTLS != nil {
			if aerr := authFailure(err, f.addr); aerr != nil {
				err = aerr
			}
		}
		var fatal *fatalError
		if errors.As(err, &fatal) {
			return fatal.err
		}
		// A pooled connection the server closed while it sat idle fails
		// before any byte: redial at once, without counting a break.
		stale := cc != nil && cc.reused && f.state[i].done == before
		drop()
		if stale {
			f.putBack(i)
			continue
		}
		if rerr := f.requeue(i, err); rerr != nil {
			return rerr
		}
		if err := sleep(ctx, backoff); err != nil {
			return err
		}
		backoff = min(2*backoff, time.Second)
	}
}

// putBack returns a range to the front of the queue without counting a break.
func (f *fetch) putBack(i int) {
	f.mu.Lock()
	f.pending = append([]int{i}, f.pending...)
	f.mu.Unlock()
}

// connect takes an idle pooled connection to the server, or dials one.
func (f *fetch) connect(ctx context.Context) (*clientConn, error) {
	if c := f.pool.get(f.addr); c != nil {
		c.reused = true
		return c, nil
	}
	c, err := f.dial(ctx)
	if err != nil {
		return nil, err
	}
	return &clientConn{Conn: c, br: bufio.NewReaderSize(c, 64<<10)}, nil
}

// clientConn is a client connection with its read buffer, poolable
// between fetches: a request/reply exchange leaves nothing buffered.
type clientConn struct {
	net.Conn
	br     *bufio.Reader
	reused bool
}

// pool keeps idle client connections per server address, so a sharded
// plan's many small pair transfers do not each pay for new connections.
// A nil pool keeps nothing.
type pool struct {
	mu      sync.Mutex
	max     int
	idle    map[string][]*clientConn
	stopped bool
}

func newPool(max int) *pool { return &pool{max: max, idle: map[string][]*clientConn{}} }

func (p *pool) get(addr string) *clientConn {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	cs := p.idle[addr]
	if len(cs) == 0 {
		return nil
	}
	c := cs[len(cs)-1]
	p.idle[addr] = cs[:len(cs)-1]
	return c
}

func (p *pool) put(addr string, c *clientConn) {
	if p != nil {
		p.mu.Lock()
		if !p.stopped && len(p.idle[addr]) < p.max {
			p.idle[addr] = append(p.idle[addr], c)
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
	c.Close()
}

func (p *pool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = true
	for addr, cs := range p.idle {
		for _, c := range cs {
			c.Close()
		}
		delete(p.idle, addr)
	}
}

// fatalError wraps failures that a reconnect cannot fix.
type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }

func (f *fetch) dial(ctx context.Context) (net.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, f.cfg.IOTimeout)
	defer cancel()
	var c net.Conn
	var err error
	if f.cfg.Dial != nil {
		c, err = f.cfg.Dial(dctx, "tcp", f.addr)
	} else {
		var d net.Dialer
		c, err = d.DialContext(dctx, "tcp", f.addr)
	}
	if err != nil {
		return nil, err
	}
	return clientHandshake(dctx, f.cfg.ClientTLS, c, f.addr)
}

// fetchRange requests the remainder of range i and reads it into the sink.
func (f *fetch) fetchRange(conn net.Conn, br *bufio.Reader, i int) error {
	r, st := f.ranges[i], &f.state[i]
	off, n := r.Offset+st.done, r.Length-st.done
	conn.SetDeadline(time.Now().Add(f.cfg.IOTimeout))
	if err := writeRequest(conn, request{id: f.id, index: uint32(i), offset: off, length: n}); err != nil {
		return err
	}
	status, msg, err := readStatus(br)
	if err != nil {
		return err
	}
	switch status {
	case statusOK:
	case statusUnknown:
		return &fatalError{fmt.Errorf("%w: %s at %s", dataplane.ErrUnknownTransfer, msg, f.addr)}
	default:
		return &fatalError{&dataplane.RangeError{Index: i, Range: r, Err: fmt.Errorf("%w: server refused: %s", errProtocol, msg)}}
	}
	var buf []byte
	for st.done < r.Length {
		k := min(r.Length-st.done, int64(f.cfg.ChunkBytes))
		var b []byte
		if f.slicer != nil {
			if b, err = f.slicer.Slice(r.Offset+st.done, k); err != nil {
				return &fatalError{&dataplane.RangeError{Index: i, Range: r, Err: err}}
			}
		} else {
			if buf == nil {
				buf = make([]byte, f.cfg.ChunkBytes)
			}
			b = buf[:k]
		}
		conn.SetReadDeadline(time.Now().Add(f.cfg.IOTimeout))
		m, rerr := io.ReadFull(br, b)
		// Keep what did arrive before a break: it is the resume point.
		if m > 0 {
			st.chk.Write(b[:m])
			if f.slicer == nil {
				if _, err := f.dst.WriteAt(b[:m], r.Offset+st.done); err != nil {
					return &fatalError{&dataplane.RangeError{Index: i, Range: r, Err: err}}
				}
			}
			st.done += int64(m)
			f.mu.Lock()
			f.received += int64(m)
			f.mu.Unlock()
		}
		if rerr != nil {
			return rerr
		}
	}
	if err := st.chk.Verify(); err != nil {
		return &fatalError{&dataplane.RangeError{Index: i, Range: r, Err: err}}
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
