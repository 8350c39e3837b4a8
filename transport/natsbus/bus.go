package natsbus

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/transport"
)

// Bus is transport.Bus over a NATS connection, optionally owning an embedded
// nats-server.
type Bus struct {
	opts   Options
	log    zerolog.Logger
	nc     *nats.Conn
	js     jetstream.JetStream
	srv    *server.Server // nil when connected by URL
	tmpDir string         // removed on Close when we created it

	closedCh chan struct{} // closed by the connection's ClosedHandler

	permViolations atomic.Int64 // the server's Permissions Violation errors

	mu        sync.Mutex
	closed    bool
	consumers map[*consumeSub]struct{}
	// subs are the live plain and queue subscriptions; retiredDrops the
	// slow-consumer drops of those already gone (slowconsumer.go).
	subs         map[*sub]struct{}
	retiredDrops int64
	slowLog      rateLimited
}

var _ transport.Bus = (*Bus)(nil)

// Connect starts an embedded server (when opts.URL is empty) and connects to
// it, or connects to opts.URL. ctx bounds the whole start-up.
func Connect(ctx context.Context, opts Options) (*Bus, error) {
	opts = opts.withDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	b := &Bus{opts: opts, log: opts.Logger, closedCh: make(chan struct{}), consumers: map[*consumeSub]struct{}{},
		subs: map[*sub]struct{}{}}
	url := opts.URL
	if url == "" {
		if err := b.startServer(ctx); err != nil {
			return nil, err
		}
		url = b.srv.ClientURL()
	}
	if err := ctx.Err(); err != nil {
		b.stopServer()
		return nil, fmt.Errorf("natsbus: connect: %w", err)
	}
	timeout := opts.ConnectTimeout
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
		timeout = max(time.Until(dl), time.Millisecond)
	}
	log := b.log
	nopts := append([]nats.Option{
		nats.Name(opts.Name),
		nats.Timeout(timeout),
		nats.ReconnectWait(opts.ReconnectWait),
		nats.MaxReconnects(opts.MaxReconnects),
		nats.DrainTimeout(opts.DrainTimeout),
		nats.ClosedHandler(func(*nats.Conn) { close(b.closedCh) }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn().Err(err).Str("url", url).Msg("natsbus: disconnected")
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info().Str("url", c.ConnectedUrlRedacted()).Msg("natsbus: reconnected")
		}),
		nats.ErrorHandler(func(_ *nats.Conn, s *nats.Subscription, err error) {
			ev := log.Warn().Err(err)
			if s != nil {
				ev = ev.Str("subject", s.Subject)
			}
			if errors.Is(err, nats.ErrPermissionViolation) {
				b.permViolations.Add(1)
				ev = log.Error().Err(err)
				if s != nil {
					ev = ev.Str("subject", s.Subject)
				}
				ev.Msg("natsbus: the server refused a publish or subscription outside this user's permissions")
				return
			}
			if errors.Is(err, nats.ErrSlowConsumer) {
				b.slowConsumer(s)
				return
			}
			ev.Msg("natsbus: async error")
		}),
	}, opts.clientOptions()...)
	nc, err := nats.Connect(url, nopts...)
	if err != nil {
		b.stopServer()
		return nil, fmt.Errorf("natsbus: connect %s: %w", redact(url), authError(err, opts.Auth))
	}
	b.nc = nc
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		b.stopServer()
		return nil, fmt.Errorf("natsbus: jetstream: %w", err)
	}
	b.js = js
	return b, nil
}

func (b *Bus) startServer(ctx context.Context) error {
	o := b.opts
	dir := o.StoreDir
	if dir == "" {
		d, err := os.MkdirTemp("", "asyncrl-nats-*")
		if err != nil {
			return fmt.Errorf("natsbus: store dir: %w", err)
		}
		dir, b.tmpDir = d, d
	}
	sopts := &server.Options{
		ServerName: o.Name,
		Host:       o.Host,
		Port:       server.RANDOM_PORT,
		JetStream:  true,
		StoreDir:   dir,
		MaxPayload: int32(o.MaxPayload),
		NoSigs:     true,
		NoLog:      true,
	}
	if o.Port > 0 {
		sopts.Port = o.Port
	}
	if c := o.Cluster; c != nil {
		host, port, _ := splitHostPort(c.Listen)
		if port == 0 {
			port = server.RANDOM_PORT
		}
		sopts.Cluster = server.ClusterOpts{Name: c.Name, Host: host, Port: port}
		if len(c.Routes) > 0 {
			sopts.Routes = server.RoutesFromStr(strings.Join(c.Routes, ","))
		}
	}
	if err := o.applyServerSecurity(sopts); err != nil {
		b.removeTmp()
		return err
	}
	bridge := b.log.GetLevel() <= zerolog.DebugLevel
	if bridge {
		sopts.NoLog = false
	}
	if err := probeListeners(sopts); err != nil {
		b.removeTmp()
		return err
	}
	srv, err := server.NewServer(sopts)
	if err != nil {
		b.removeTmp()
		return fmt.Errorf("natsbus: embedded server: %w", err)
	}
	if bridge {
		srv.SetLoggerV2(serverLogger{b.log}, true, false, false)
	}
	b.srv = srv
	srv.Start()
	wait := o.ReadyTimeout
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
		wait = max(time.Until(dl), time.Millisecond)
	}
	if !srv.ReadyForConnections(wait) {
		// The server keeps a listener's error to itself: it stores it
		// (routeListenerErr, nats-server v2.15.2 server/route.go) and calls
		// Fatalf, which without a logger (NoLog) neither logs nor exits
		// (server/log.go executeLogCall); ReadyForConnections drops the
		// reason (server/server.go readyForConnections), and the health
		// check returns it.
		why := srv.Healthz(nil).Error
		b.stopServer()
		if why != "" {
			return fmt.Errorf("natsbus: embedded server not ready after %s: %s", wait, why)
		}
		return fmt.Errorf("natsbus: embedded server not ready after %s", wait)
	}
	b.log.Debug().Str("url", srv.ClientURL()).Str("store", dir).Msg("natsbus: embedded server started")
	return nil
}

// probeListeners binds and closes each port the server is told to listen
// on (the client port and the route port, where named), so a port another
// process holds fails the start at once, with the bind's error (errors.Is
// syscall.EADDRINUSE), instead of the readiness wait running out: the
// server would only record the failure and never listen.
func probeListeners(o *server.Options) error {
	for _, l := range []struct {
		what string
		host string
		port int
	}{{"client", o.Host, o.Port}, {"cluster", o.Cluster.Host, o.Cluster.Port}} {
		if l.port <= 0 {
			continue
		}
		host := cmp.Or(l.host, server.DEFAULT_HOST) // the server's own default for an empty host (nats-server v2.15.2 server/opts.go setBaselineOptions)
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(l.port)))
		if err != nil {
			return fmt.Errorf("natsbus: embedded server's %s port: %w", l.what, err)
		}
		_ = ln.Close()
	}
	return nil
}

func (b *Bus) stopServer() {
	if b.srv != nil {
		b.srv.Shutdown()
		b.srv.WaitForShutdown()
	}
	b.removeTmp()
}

func (b *Bus) removeTmp() {
	if b.tmpDir != "" {
		if err := os.RemoveAll(b.tmpDir); err != nil {
			b.log.Warn().Err(err).Str("dir", b.tmpDir).Msg("natsbus: removing store dir")
		}
		b.tmpDir = ""
	}
}

// ClientURL is the URL other processes and nodes use to reach the embedded
// server ("nats://127.0.0.1:<port>"), or the URL connected to.
func (b *Bus) ClientURL() string {
	if b.srv != nil {
		return b.srv.ClientURL()
	}
	return b.nc.ConnectedUrl()
}

// ClusterURL is the embedded server's route URL for other cluster members,
// or "" when the server is not clustered.
func (b *Bus) ClusterURL() string {
	if b.srv == nil || b.opts.Cluster == nil {
		return ""
	}
	addr := b.srv.ClusterAddr()
	if addr == nil {
		return ""
	}
	return "nats-route://" + addr.String()
}

// Routes is how many cluster routes the embedded server has (0 without an
// embedded clustered server).
func (b *Bus) Routes() int {
	if b.srv == nil {
		return 0
	}
	return b.srv.NumRoutes()
}

// RoutePeers are the server names of the cluster members this embedded
// server has a route to (sorted, each once; route pooling opens several
// connections per peer).
func (b *Bus) RoutePeers() []string {
	if b.srv == nil {
		return nil
	}
	rz, err := b.srv.Routez(nil)
	if err != nil {
		return nil
	}
	var out []string
	for _, r := range rz.Routes {
		if r.RemoteName != "" && !slices.Contains(out, r.RemoteName) {
			out = append(out, r.RemoteName)
		}
	}
	slices.Sort(out)
	return out
}

// PermissionViolations counts the publishes and subscriptions the server
// refused because they fall outside this client's permissions (each is
// also logged at error level with its subject).
func (b *Bus) PermissionViolations() int64 { return b.permViolations.Load() }

// Embedded reports whether this bus owns an in-process server.
func (b *Bus) Embedded() bool { return b.srv != nil }

// Conn is the underlying connection, for data planes that need NATS features
// the Bus interface does not carry (headers, object store). Do not close it.
func (b *Bus) Conn() *nats.Conn { return b.nc }

// MaxPayload is the server's advertised max_payload.
func (b *Bus) MaxPayload() int { return int(b.nc.MaxPayload()) }

func (b *Bus) checkOpen() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return transport.ErrClosed
	}
	return nil
}

func (b *Bus) checkPayload(subject string, n int) error {
	if limit := b.MaxPayload(); n > limit {
		return fmt.Errorf("%w: %d bytes on %s exceeds the server's max_payload of %d bytes", transport.ErrPayloadTooLarge, n, subject, limit)
	}
	return nil
}

// Publish implements transport.Bus.
func (b *Bus) Publish(ctx context.Context, subject string, data []byte) error {
	if err := b.checkOpen(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := transport.ValidateSubject(subject); err != nil {
		return err
	}
	if err := b.checkPayload(subject, len(data)); err != nil {
		return err
	}
	return mapErr(b.nc.Publish(subject, data))
}

// Subscribe implements transport.Bus.
func (b *Bus) Subscribe(subject string, h transport.Handler) (transport.Subscription, error) {
	return b.subscribe(subject, "", h)
}

// QueueSubscribe implements transport.Bus.
func (b *Bus) QueueSubscribe(subject, queue string, h transport.Handler) (transport.Subscription, error) {
	if err := transport.ValidToken(queue); err != nil {
		return nil, fmt.Errorf("queue name: %w", err)
	}
	return b.subscribe(subject, queue, h)
}

func (b *Bus) subscribe(subject, queue string, h transport.Handler) (transport.Subscription, error) {
	if err := b.checkOpen(); err != nil {
		return nil, err
	}
	if err := transport.ValidatePattern(subject); err != nil {
		return nil, err
	}
	cb := func(m *nats.Msg) { h(convert(m)) }
	var s *nats.Subscription
	var err error
	if queue == "" {
		s, err = b.nc.Subscribe(subject, cb)
	} else {
		s, err = b.nc.QueueSubscribe(subject, queue, cb)
	}
	if err != nil {
		return nil, fmt.Errorf("natsbus: subscribe %s: %w", subject, mapErr(err))
	}
	if err := s.SetPendingLimits(b.opts.PendingMsgs, b.opts.PendingBytes); err != nil {
		_ = s.Unsubscribe()
		return nil, fmt.Errorf("natsbus: subscribe %s: pending limits: %w", subject, mapErr(err))
	}
	out := &sub{s: s, b: b}
	b.mu.Lock()
	b.subs[out] = struct{}{}
	b.mu.Unlock()
	return out, nil
}

type sub struct {
	s *nats.Subscription
	b *Bus
}

func (s *sub) Unsubscribe() error {
	s.b.retire(s)
	err := s.s.Unsubscribe()
	if errors.Is(err, nats.ErrBadSubscription) || errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrConnectionDraining) {
		return nil
	}
	return err
}

func convert(m *nats.Msg) *transport.Msg {
	out := &transport.Msg{Subject: m.Subject, Reply: m.Reply, Data: m.Data}
	if len(m.Header) > 0 {
		out.Header = make(map[string]string, len(m.Header))
		for k, v := range m.Header {
			if len(v) > 0 {
				out.Header[k] = v[0]
			}
		}
	}
	return out
}

// Request implements transport.Bus. Without a deadline on ctx it waits until
// ctx is cancelled.
func (b *Bus) Request(ctx context.Context, subject string, data []byte) (*transport.Msg, error) {
	if err := b.checkOpen(); err != nil {
		return nil, err
	}
	if err := transport.ValidateSubject(subject); err != nil {
		return nil, err
	}
	if err := b.checkPayload(subject, len(data)); err != nil {
		return nil, err
	}
	m, err := b.nc.RequestWithContext(ctx, subject, data)
	if err != nil {
		return nil, fmt.Errorf("natsbus: request %s: %w", subject, mapErr(err))
	}
	return convert(m), nil
}

// Respond implements transport.Bus.
func (b *Bus) Respond(ctx context.Context, req *transport.Msg, data []byte) error {
	if req == nil || req.Reply == "" {
		return fmt.Errorf("natsbus: respond: message has no reply subject")
	}
	return b.Publish(ctx, req.Reply, data)
}

// mapErr turns nats errors into the transport sentinels, keeping the cause.
func mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse):
		return fmt.Errorf("%w: %w", transport.ErrNoResponders, err)
	case errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %w", transport.ErrTimeout, err)
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionDraining):
		return fmt.Errorf("%w: %w", transport.ErrClosed, err)
	case errors.Is(err, nats.ErrMaxPayload):
		return fmt.Errorf("%w: %w", transport.ErrPayloadTooLarge, err)
	case errors.Is(err, nats.ErrBadSubject):
		return fmt.Errorf("%w: %w", transport.ErrBadSubject, err)
	case unavailable(err):
		return fmt.Errorf("%w: %w", transport.ErrUnavailable, err)
	}
	return err
}

// unavailable: a JetStream API answer with HTTP-like code 503 (nats.go
// v1.55.0 jetstream/errors.go: APIError.Code; e.g. err_code 10008 "JetStream
// system temporarily unavailable", which nats.go's own js.go retries) —
// except JetStream not enabled (err_code 10076) or not enabled for the
// account (10039): 503s too, but a lasting misconfiguration (an external
// NATS started without -js), which no retry mends.
func unavailable(err error) bool {
	var je jetstream.JetStreamError
	if errors.As(err, &je) {
		if a := je.APIError(); a != nil {
			switch a.ErrorCode {
			case jetstream.JSErrCodeJetStreamNotEnabled, jetstream.JSErrCodeJetStreamNotEnabledForAccount:
				return false
			}
			return a.Code == 503
		}
	}
	return false
}

// Close stops stream consumers, drains the connection (letting in-flight
// handlers finish), shuts the embedded server down and removes the temporary
// store directory. It is safe to call more than once.
func (b *Bus) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	for s := range b.subs {
		b.retireLocked(s)
	}
	cons := make([]*consumeSub, 0, len(b.consumers))
	for c := range b.consumers {
		cons = append(cons, c)
	}
	b.mu.Unlock()
	for _, c := range cons {
		c.stop()
	}
	var errs []error
	if err := b.nc.Drain(); err != nil {
		b.nc.Close()
		errs = append(errs, fmt.Errorf("natsbus: drain: %w", err))
	}
	select {
	case <-b.closedCh:
	case <-time.After(b.opts.DrainTimeout + time.Second):
		b.nc.Close()
		<-b.closedCh
	}
	b.stopServer()
	return errors.Join(errs...)
}

// serverLogger bridges nats-server's logger to zerolog at debug level: the
// server's notices are interesting while debugging, noise otherwise.
type serverLogger struct{ l zerolog.Logger }

func (s serverLogger) Noticef(f string, v ...any) { s.l.Debug().Msgf("nats-server: "+f, v...) }
func (s serverLogger) Warnf(f string, v ...any) {
	s.l.Debug().Str("nats", "warn").Msgf("nats-server: "+f, v...)
}
func (s serverLogger) Fatalf(f string, v ...any) { s.l.Error().Msgf("nats-server: "+f, v...) }
func (s serverLogger) Errorf(f string, v ...any) {
	s.l.Debug().Str("nats", "error").Msgf("nats-server: "+f, v...)
}
func (s serverLogger) Debugf(f string, v ...any) { s.l.Debug().Msgf("nats-server: "+f, v...) }
func (s serverLogger) Tracef(f string, v ...any) { s.l.Trace().Msgf("nats-server: "+f, v...) }

func redact(url string) string {
	if i := strings.Index(url, "@"); i >= 0 {
		if j := strings.Index(url, "://"); j >= 0 && j < i {
			return url[:j+3] + "***" + url[i:]
		}
	}
	return url
}
