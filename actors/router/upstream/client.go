package upstream

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"
)

// Client is the pool of keep-alive connections to the replicas, by
// host:port. It is safe for concurrent use.
type Client struct {
	// Dialer dials a new connection (5 s timeout, 30 s keep-alive); the
	// proxy's loop front dials with it too. Not changed after New.
	Dialer net.Dialer
	// MaxIdle is the most idle connections kept per host (256). Not
	// changed after New.
	MaxIdle int

	mu     sync.Mutex
	idle   map[string][]*Conn // by host:port
	closed bool
}

// New returns an empty pool.
func New() *Client {
	return &Client{
		Dialer:  net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second},
		MaxIdle: 256,
		idle:    make(map[string][]*Conn),
	}
}

func (u *Client) get(ctx context.Context, host string) (*Conn, bool, error) {
	u.mu.Lock()
	if l := u.idle[host]; len(l) > 0 {
		c := l[len(l)-1]
		u.idle[host] = l[:len(l)-1]
		u.mu.Unlock()
		return c, true, nil
	}
	u.mu.Unlock()
	nc, err := u.Dialer.DialContext(ctx, "tcp", host)
	if err != nil {
		return nil, false, err
	}
	return NewConn(nc, host, nil), false, nil
}

func (u *Client) put(c *Conn) {
	u.mu.Lock()
	if !u.closed && len(u.idle[c.host]) < u.MaxIdle {
		u.idle[c.host] = append(u.idle[c.host], c)
		u.mu.Unlock()
		return
	}
	u.mu.Unlock()
	_ = c.c.Close()
}

// CloseIdleConnections closes the pooled connections and keeps none from
// now on (the router's Shutdown); connections in use close when their
// request ends.
func (u *Client) CloseIdleConnections() {
	u.mu.Lock()
	idle := u.idle
	u.idle = make(map[string][]*Conn)
	u.closed = true
	u.mu.Unlock()
	for _, l := range idle {
		for _, c := range l {
			_ = c.c.Close()
		}
	}
}

// RoundTrip sends method uri with body to host (host:port) and returns the
// answer; its Body returns the connection to the pool when read to the
// end and closed (the caller must close it).
func (u *Client) RoundTrip(ctx context.Context, method, host, uri string, h HeaderWriter, body []byte) (*http.Response, error) {
	for try := 0; ; try++ {
		c, reused, err := u.get(ctx, host)
		if err != nil {
			return nil, err
		}
		stop := AfterFunc(ctx, c.abortFn)
		resp, err := c.exchange(method, host, uri, h, body)
		if err == nil {
			u.TrackBody(c, resp, stop)
			return resp, nil
		}
		stop()
		_ = c.c.Close()
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if !reused || try > 0 || !errors.Is(err, ErrNoAnswer) {
			return nil, err
		}
		// A reused idle connection the replica had closed: replay once on a new one.
	}
}

// TrackBody makes resp (an answer read from c) give c back to u's pool
// when its body is read to the end and closed, and calls stop (the
// cancellation's AfterFunc stop) then; a body that failed, was cut short
// or whose replica asked to close closes c instead.
func (u *Client) TrackBody(c *Conn, resp *http.Response, stop func() bool) {
	c.body = upBody{rc: resp.Body, c: c, u: u, resp: resp, stop: stop}
	resp.Body = &c.body
}

// AfterFunc is context.AfterFunc, through the context's own AfterFunc
// method when it has one: the fast front's connCtx registers without an
// allocation, where context.AfterFunc allocates its own context and two
// closures per call even then.
func AfterFunc(ctx context.Context, f func()) (stop func() bool) {
	if a, ok := ctx.(interface{ AfterFunc(func()) func() bool }); ok {
		return a.AfterFunc(f)
	}
	return context.AfterFunc(ctx, f)
}
