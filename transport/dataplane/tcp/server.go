package tcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport/dataplane"
)

// published is one registered source.
type published struct {
	ranges []messages.ByteRange
	src    io.ReaderAt

	mu     sync.Mutex
	closed bool
	active map[net.Conn]struct{} // connections sending from src now
	sends  sync.WaitGroup
}

// begin registers c as sending from p; false once p is withdrawn.
func (p *published) begin(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	if p.active == nil {
		p.active = map[net.Conn]struct{}{}
	}
	p.active[c] = struct{}{}
	p.sends.Add(1)
	return true
}

func (p *published) end(c net.Conn) {
	p.mu.Lock()
	delete(p.active, c)
	p.mu.Unlock()
	p.sends.Done()
}

// withdraw stops new sends, interrupts running ones (their clients resume
// elsewhere or fail) and waits until nothing reads src any more, so the
// caller may reuse the memory as soon as the Offer's Close returns.
func (p *published) withdraw() {
	p.mu.Lock()
	p.closed = true
	for c := range p.active {
		c.Close()
	}
	p.mu.Unlock()
	p.sends.Wait()
}

// server answers range requests for published transfers.
type server struct {
	cfg     Config
	ln      net.Listener
	limiter *limiter
	ctx     context.Context
	cancel  context.CancelFunc

	mu      sync.Mutex
	entries map[string]*published
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
	// refusedLog logs refused TLS handshakes, at most 5 a minute (a
	// scanner must not flood the log).
	refusedLog zerolog.Logger
}

func startServer(cfg Config) (*server, error) {
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("tcp: listen %s: %w", cfg.Addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &server{
		cfg: cfg, ln: ln, ctx: ctx, cancel: cancel,
		limiter:    newLimiter(cfg.BytesPerSecond, cfg.ChunkBytes),
		entries:    map[string]*published{},
		conns:      map[net.Conn]struct{}{},
		refusedLog: cfg.Logger.Sample(&zerolog.BurstSampler{Burst: 5, Period: time.Minute}),
	}
	s.wg.Add(1)
	go s.acceptLoop()
	return s, nil
}

func (s *server) acceptLoop() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.cfg.Logger.Warn().Err(err).Msg("dataplane/tcp: accept failed; server stops")
			}
			return
		}
		s.mu.Lock()
		if s.ctx.Err() != nil {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(c)
	}
}

func (s *server) register(id string, p *published) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.entries[id]; dup {
		return fmt.Errorf("%w: transfer %q is already published", dataplane.ErrBadPlan, id)
	}
	s.entries[id] = p
	return nil
}

func (s *server) unregister(id string) {
	s.mu.Lock()
	p := s.entries[id]
	delete(s.entries, id)
	s.mu.Unlock()
	if p != nil {
		p.withdraw()
	}
}

func (s *server) lookup(id string) *published {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.entries[id]
}

// dropConnections closes every open connection (clients resume); used by
// close and by tests that break transfers from the server side.
func (s *server) dropConnections() {
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
}

func (s *server) close() error {
	s.mu.Lock()
	s.cancel()
	s.mu.Unlock()
	err := s.ln.Close()
	s.dropConnections()
	s.wg.Wait()
	return err
}

func (s *server) serve(raw net.Conn) {
	defer func() {
		s.mu.Lock()
		delete(s.conns, raw)
		s.mu.Unlock()
		raw.Close()
		s.wg.Done()
	}()
	// The handshake runs here, not in the accept loop, so a peer that
	// stalls it holds only its own connection.
	c, err := s.handshake(raw)
	if err != nil {
		if s.ctx.Err() == nil {
			s.refusedLog.Warn().Err(err).Str("peer", raw.RemoteAddr().String()).
				Msg("dataplane/tcp: TLS handshake refused (a peer without the cluster's certificate?)")
		}
		return
	}
	var buf []byte
	for {
		// An idle client connection may wait for its next range for a while;
		// only the reads and writes of a request are bounded.
		c.SetDeadline(time.Time{})
		req, err := readRequest(c)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && s.ctx.Err() == nil {
				s.cfg.Logger.Debug().Err(err).Msg("dataplane/tcp: request read failed")
			}
			return
		}
		c.SetDeadline(time.Now().Add(s.cfg.IOTimeout))
		p := s.lookup(req.id)
		if p == nil || !p.begin(c) {
			writeStatus(c, statusUnknown, fmt.Sprintf("transfer %q is not published here", req.id))
			continue
		}
		if err := s.answer(c, p, req, &buf); err != nil {
			if s.ctx.Err() == nil {
				s.cfg.Logger.Debug().Err(err).Str("transfer", req.id).Msg("dataplane/tcp: send failed")
			}
			return
		}
	}
}

// answer checks req against p's ranges and sends the bytes; an error
// means the connection is unusable.
func (s *server) answer(c net.Conn, p *published, req request, buf *[]byte) error {
	defer p.end(c)
	if int(req.index) >= len(p.ranges) {
		return writeStatus(c, statusBadRequest, fmt.Sprintf("range %d of %d", req.index, len(p.ranges)))
	}
	r := p.ranges[req.index]
	if req.length < 0 || req.offset < r.Offset || req.offset+req.length > r.Offset+r.Length {
		return writeStatus(c, statusBadRequest, fmt.Sprintf("bytes %d+%d outside range %d (%s)", req.offset, req.length, req.index, r.String()))
	}
	if err := writeStatus(c, statusOK, ""); err != nil {
		return err
	}
	return s.send(c, p.src, req.offset, req.length, buf)
}

// send writes src[off:off+n] to c in chunks, waiting on the rate limiter
// before each, through the cheapest path the source allows.
func (s *server) send(c net.Conn, src io.ReaderAt, off, n int64, buf *[]byte) error {
	for n > 0 {
		k := min(n, int64(s.cfg.ChunkBytes))
		if err := s.limiter.wait(s.ctx, int(k)); err != nil {
			return err
		}
		c.SetWriteDeadline(time.Now().Add(s.cfg.IOTimeout))
		var err error
		switch src := src.(type) {
		case dataplane.Slicer:
			var b []byte
			if b, err = src.Slice(off, k); err == nil {
				_, err = c.Write(b)
			}
		case *os.File:
			err = sendFile(c, src, off, k)
		default:
			if *buf == nil {
				*buf = make([]byte, s.cfg.ChunkBytes)
			}
			b := (*buf)[:k]
			var m int
			// ReaderAt may report io.EOF together with a full read at the end.
			if m, err = src.ReadAt(b, off); m == len(b) {
				_, err = c.Write(b)
			} else if err == nil {
				err = io.ErrUnexpectedEOF
			}
		}
		if err != nil {
			return err
		}
		off += k
		n -= k
	}
	return nil
}

// sendFile moves f[off:off+n] to c with sendfile(2) and an explicit offset,
// so the bytes never enter user space and concurrent streams of one file do
// not share (or move) its position. Non-TCP connections (tests wrap them)
// take the copying path.
func sendFile(c net.Conn, f *os.File, off, n int64) error {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		_, err := io.Copy(c, io.NewSectionReader(f, off, n))
		return err
	}
	cr, err := tc.SyscallConn()
	if err != nil {
		return err
	}
	fr, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var sent int64
	var serr error
	ferr := fr.Control(func(ffd uintptr) {
		werr := cr.Write(func(cfd uintptr) bool {
			for sent < n {
				o := off + sent
				m, e := syscall.Sendfile(int(cfd), int(ffd), &o, int(min(n-sent, 1<<30)))
				if m > 0 {
					sent += int64(m)
				}
				switch {
				case e == syscall.EAGAIN:
					return false // wait until the socket is writable again
				case e == syscall.EINTR:
					continue
				case e != nil:
					serr = os.NewSyscallError("sendfile", e)
					return true
				case m == 0:
					serr = io.ErrUnexpectedEOF // file shorter than the range
					return true
				}
			}
			return true
		})
		if serr == nil {
			serr = werr
		}
	})
	if serr != nil {
		return serr
	}
	return ferr
}
