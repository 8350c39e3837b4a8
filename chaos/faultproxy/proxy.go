package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Kind is a fault mode.
type Kind int

// Fault kinds; see the package contract.
const (
	Pass Kind = iota
	Latency
	Reset
	Blackhole
)

func (k Kind) String() string {
	switch k {
	case Pass:
		return "pass"
	case Latency:
		return "latency"
	case Reset:
		return "reset"
	case Blackhole:
		return "blackhole"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Fault is the proxy's current behaviour.
type Fault struct {
	// Kind is the mode.
	Kind Kind
	// Delay is the hold per forwarded chunk (Latency only; must be > 0 there).
	Delay time.Duration
}

// ErrFault marks an invalid Fault.
var ErrFault = errors.New("faultproxy: invalid fault")

// Stats counts what the proxy did.
type Stats struct {
	// Accepted connections in total.
	Accepted int64
	// Reset connections (client side), live ones at the switch included.
	Reset int64
	// Blackholed connections: accepted during Blackhole, never dialled.
	Blackholed int64
	// Delayed chunks: held by a Latency fault before being forwarded.
	Delayed int64
	// Held chunks: stalled on a live connection by a Blackhole fault.
	Held int64
	// Live connections now (client and upstream sides).
	Live int
}

// Proxy forwards TCP connections to a target with switchable faults.
type Proxy struct {
	ln     net.Listener
	target string
	dialer net.Dialer

	mu      sync.Mutex
	fault   Fault
	changed chan struct{} // closed and replaced by every Set
	conns   map[net.Conn]struct{}
	stats   Stats
	closed  bool

	done chan struct{} // closed by Close
	wg   sync.WaitGroup
}

// Listen starts a proxy on addr ("" means 127.0.0.1:0) forwarding to
// target (host:port), in Pass mode.
func Listen(addr, target string) (*Proxy, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	if _, _, err := net.SplitHostPort(target); err != nil {
		return nil, fmt.Errorf("faultproxy: target %q: %w", target, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{ln: ln, target: target, changed: make(chan struct{}), conns: map[net.Conn]struct{}{},
		done: make(chan struct{}), dialer: net.Dialer{Timeout: 2 * time.Second}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL is http://Addr, for an HTTP backend.
func (p *Proxy) URL() string { return "http://" + p.Addr() }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Fault returns the current fault.
func (p *Proxy) Fault() Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fault
}

// Stats returns the counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Live = len(p.conns)
	return s
}

// Set switches the fault for every connection. Switching to Reset resets
// every live connection now.
func (p *Proxy) Set(f Fault) error {
	if f.Kind < Pass || f.Kind > Blackhole {
		return fmt.Errorf("%w: kind %d", ErrFault, int(f.Kind))
	}
	if f.Kind == Latency && f.Delay <= 0 {
		return fmt.Errorf("%w: latency needs a positive delay, got %v", ErrFault, f.Delay)
	}
	p.mu.Lock()
	p.fault = f
	close(p.changed)
	p.changed = make(chan struct{})
	var victims []net.Conn
	if f.Kind == Reset {
		for c := range p.conns {
			victims = append(victims, c)
			if p.isClient(c) {
				p.stats.Reset++
			}
		}
	}
	p.mu.Unlock()
	for _, c := range victims {
		p.reset(c)
	}
	return nil
}

// Close stops accepting, closes every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	conns := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	for _, c := range conns {
		_ = c.Close()
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		if !p.track(c, true) {
			_ = c.Close()
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// track registers a live connection (accepted: a client's); false once
// the proxy is closed.
func (p *Proxy) track(c net.Conn, accepted bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	if accepted {
		p.stats.Accepted++
	}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

// reset closes c with an RST instead of a FIN, so the peer sees
// "connection reset by peer" (mid-stream too).
func (p *Proxy) reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// isClient: accepted connections' local address is the listener's.
func (p *Proxy) isClient(c net.Conn) bool {
	return c.LocalAddr().String() == p.ln.Addr().String()
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	defer p.untrack(client)
	p.mu.Lock()
	f := p.fault
	if f.Kind == Blackhole {
		p.stats.Blackholed++
	}
	p.mu.Unlock()
	switch f.Kind {
	case Reset:
		p.mu.Lock()
		p.stats.Reset++
		p.mu.Unlock()
		p.reset(client)
		return
	case Blackhole:
		// Accept, never answer: drain what the client sends until it gives
		// up or the proxy closes.
		_, _ = io.Copy(io.Discard, client)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-p.done:
		case <-ctx.Done():
		}
		cancel()
	}()
	upstream, err := p.dialer.DialContext(ctx, "tcp", p.target)
	if err != nil {
		cancel()
		// The target is down: the client sees its connection closed, as
		// with a dead engine behind a load balancer.
		return
	}
	if !p.track(upstream, false) {
		cancel()
		_ = upstream.Close()
		return
	}
	defer p.untrack(upstream)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pump(ctx, upstream, client) }()
	go func() { defer wg.Done(); p.pump(ctx, client, upstream) }()
	wg.Wait()
	cancel()
}

// pump copies src to dst, applying the current fault to every chunk.
// When src ends it half-closes dst, so HTTP bodies framed by EOF work; any
// write error ends both directions.
func (p *Proxy) pump(ctx context.Context, dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			if !p.gate(ctx) {
				_ = src.Close()
				_ = dst.Close()
				return
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				_ = src.Close()
				return
			}
		}
		if rerr != nil {
			if tc, ok := dst.(*net.TCPConn); ok && errors.Is(rerr, io.EOF) {
				_ = tc.CloseWrite()
				return
			}
			_ = dst.Close()
			return
		}
	}
}

// gate waits as the current fault says before a chunk is forwarded; false
// means the connection must end (proxy closing).
func (p *Proxy) gate(ctx context.Context) bool {
	counted := false
	for {
		p.mu.Lock()
		f, changed := p.fault, p.changed
		switch {
		case f.Kind == Latency:
			p.stats.Delayed++
		case f.Kind == Blackhole && !counted:
			p.stats.Held++
			counted = true
		}
		p.mu.Unlock()
		switch f.Kind {
		case Latency:
			t := time.NewTimer(f.Delay)
			select {
			case <-t.C:
				return true
			case <-ctx.Done():
				t.Stop()
				return false
			}
		case Blackhole:
			select {
			case <-changed:
				continue
			case <-ctx.Done():
				return false
			}
		default:
			// Pass, or Reset (the connection is being closed under us).
			return true
		}
	}
}
