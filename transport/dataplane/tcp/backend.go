package tcp

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"

	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport/dataplane"
)

// Backend is the TCP data plane.
type Backend struct {
	cfg  Config
	pool *pool

	mu     sync.Mutex
	srv    *server
	closed bool
}

var _ dataplane.Backend = (*Backend)(nil)

// New validates cfg and returns a Backend; the server starts on the first
// Publish, so a fetch-only process listens on nothing.
func New(cfg Config) (*Backend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Backend{cfg: cfg, pool: newPool(cfg.Streams)}, nil
}

// Name implements dataplane.Backend.
func (b *Backend) Name() string { return "tcp" }

// Available implements dataplane.Backend: TCP always is.
func (b *Backend) Available() error { return nil }

// Addr is the server's listen address, or "" before the first Publish.
func (b *Backend) Addr() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.srv == nil {
		return ""
	}
	return b.srv.ln.Addr().String()
}

// Publish implements dataplane.Backend.
func (b *Backend) Publish(ctx context.Context, p *messages.TransferPlan, src io.ReaderAt) (dataplane.Offer, error) {
	if p.TransferID == "" {
		return nil, fmt.Errorf("%w: empty TransferID", dataplane.ErrBadPlan)
	}
	if _, err := dataplane.ValidateRanges(p.Ranges); err != nil {
		return nil, err
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, fmt.Errorf("tcp: publish %q: backend closed", p.TransferID)
	}
	if b.srv == nil {
		srv, err := startServer(b.cfg)
		if err != nil {
			b.mu.Unlock()
			return nil, err
		}
		b.srv = srv
	}
	srv := b.srv
	b.mu.Unlock()
	ranges := append([]messages.ByteRange(nil), p.Ranges...)
	if err := srv.register(p.TransferID, &published{ranges: ranges, src: src}); err != nil {
		return nil, err
	}
	addr := srv.ln.Addr().String()
	if b.cfg.Advertise != "" {
		_, port, _ := net.SplitHostPort(addr)
		addr = net.JoinHostPort(b.cfg.Advertise, port)
	}
	uri := "tcp://" + addr + "/" + url.PathEscape(p.TransferID)
	return &offer{uri: uri, close: func() { srv.unregister(p.TransferID) }}, nil
}

// Fetch implements dataplane.Backend.
func (b *Backend) Fetch(ctx context.Context, p *messages.TransferPlan, dst io.WriterAt) (dataplane.Result, error) {
	return runFetch(ctx, b.cfg, b.pool, p, dst)
}

// DropConnections closes every server-side connection; fetching clients
// resume. It exists for fault tests and for shedding peers.
func (b *Backend) DropConnections() {
	b.mu.Lock()
	srv := b.srv
	b.mu.Unlock()
	if srv != nil {
		srv.dropConnections()
	}
}

// Close closes idle client connections, stops the server and its
// connections and waits for them.
func (b *Backend) Close() error {
	b.pool.close()
	b.mu.Lock()
	srv := b.srv
	b.srv, b.closed = nil, true
	b.mu.Unlock()
	if srv == nil {
		return nil
	}
	return srv.close()
}

type offer struct {
	uri   string
	once  sync.Once
	close func()
}

func (o *offer) URI() string { return o.uri }
func (o *offer) Close() error {
	o.once.Do(o.close)
	return nil
}
