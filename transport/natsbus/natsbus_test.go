package natsbus_test

import (
	"context"
	"errors"
	"net"
	neturl "net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/bustest"
	"github.com/asyncrl/asyncrl/transport/natsbus"
	"github.com/asyncrl/asyncrl/transport/natsbus/natstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func embedded(t *testing.T, mut func(*natsbus.Options)) *natsbus.Bus {
	t.Helper()
	opts := natsbus.DefaultOptions()
	opts.StoreDir = t.TempDir()
	if mut != nil {
		mut(&opts)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := natsbus.Connect(ctx, opts)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	return b
}

func TestConformance(t *testing.T) {
	bustest.Run(t, func(t *testing.T) (transport.Bus, func()) {
		// A small max_payload keeps the oversized-publish case cheap.
		b := embedded(t, func(o *natsbus.Options) { o.MaxPayload = 64 << 10 })
		return b, func() {
			if err := b.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		}
	})
}

func TestEmbeddedServerOnRandomLoopbackPort(t *testing.T) {
	b := embedded(t, nil)
	defer b.Close()
	if !b.Embedded() {
		t.Fatal("Embedded() = false with an empty URL")
	}
	u, err := neturl.Parse(b.ClientURL())
	if err != nil {
		t.Fatalf("ClientURL %q: %v", b.ClientURL(), err)
	}
	if u.Hostname() != "127.0.0.1" {
		t.Fatalf("embedded server host %q, want 127.0.0.1", u.Hostname())
	}
	if p := u.Port(); p == "" || p == "0" || p == "4222" {
		t.Fatalf("embedded server port %q, want a random one", p)
	}
	if got := b.MaxPayload(); got != natsbus.DefaultMaxPayload {
		t.Fatalf("MaxPayload() = %d, want the default %d", got, natsbus.DefaultMaxPayload)
	}
}

func TestOversizedPublishNamesBothSizes(t *testing.T) {
	b := embedded(t, func(o *natsbus.Options) { o.MaxPayload = 1024 })
	defer b.Close()
	if got := b.MaxPayload(); got != 1024 {
		t.Fatalf("MaxPayload() = %d, want the configured 1024", got)
	}
	err := b.Publish(context.Background(), "asyncrl.r.weights", make([]byte, 2000))
	if !errors.Is(err, transport.ErrPayloadTooLarge) {
		t.Fatalf("got %v, want ErrPayloadTooLarge", err)
	}
	if !strings.Contains(err.Error(), "2000") || !strings.Contains(err.Error(), "1024") {
		t.Fatalf("error %q should name both sizes", err)
	}
	st, err := b.Stream(context.Background(), transport.StreamConfig{Name: "W", Subjects: []string{"asyncrl.r.weights"}, Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Publish(context.Background(), "asyncrl.r.weights", make([]byte, 2000)); !errors.Is(err, transport.ErrPayloadTooLarge) {
		t.Fatalf("stream publish: got %v, want ErrPayloadTooLarge", err)
	}
}

// TestConnectByURL exercises the external-server path against a second
// embedded server, and shows the URL path adopts that server's max_payload.
func TestConnectByURL(t *testing.T) {
	server := embedded(t, func(o *natsbus.Options) { o.MaxPayload = 4096 })
	defer server.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, err := natsbus.Connect(ctx, natsbus.Options{URL: server.ClientURL(), Name: "client", MaxPayload: 1 << 20})
	if err != nil {
		t.Fatalf("Connect by URL: %v", err)
	}
	defer client.Close()
	if client.Embedded() {
		t.Fatal("a URL connection must not start a server")
	}
	if got := client.MaxPayload(); got != 4096 {
		t.Fatalf("MaxPayload() = %d, want the server's advertised 4096", got)
	}
	var got atomic.Value
	if _, err := server.Subscribe("asyncrl.r.steps", func(m *transport.Msg) { got.Store(string(m.Data)) }); err != nil {
		t.Fatal(err)
	}
	// Subscriptions on the server-side connection are registered once it
	// round-trips; a request/reply confirms the path both ways.
	if _, err := server.Subscribe("asyncrl.r.control", func(m *transport.Msg) { _ = server.Respond(ctx, m, []byte("pong")) }); err != nil {
		t.Fatal(err)
	}
	if err := server.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	rep, err := client.Request(ctx, "asyncrl.r.control", []byte("ping"))
	if err != nil || string(rep.Data) != "pong" {
		t.Fatalf("request over URL: %v %v", rep, err)
	}
	if err := client.Publish(ctx, "asyncrl.r.steps", []byte("step-7")); err != nil {
		t.Fatal(err)
	}
	bustest.Eventually(t, 5*time.Second, "message from the URL client", func() bool { return got.Load() == "step-7" })
	if err := client.Publish(ctx, "asyncrl.r.steps", make([]byte, 5000)); !errors.Is(err, transport.ErrPayloadTooLarge) {
		t.Fatalf("publish above the server's max_payload: %v, want ErrPayloadTooLarge", err)
	}
}

func TestRequestTimeout(t *testing.T) {
	b := embedded(t, nil)
	defer b.Close()
	if _, err := b.Subscribe("asyncrl.r.control", func(*transport.Msg) {}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := b.Request(ctx, "asyncrl.r.control", nil)
	if !errors.Is(err, transport.ErrTimeout) {
		t.Fatalf("got %v, want ErrTimeout", err)
	}
}

// TestDurableSurvivesRestart checks the point of JetStream: a stream and a
// durable's ack position survive closing the bus and starting a new embedded
// server on the same store directory.
func TestDurableSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := transport.StreamConfig{Name: "TRAJ", Subjects: []string{"asyncrl.r.trajectories"}}
	b1 := embedded(t, func(o *natsbus.Options) { o.StoreDir = dir })
	st, err := b1.Stream(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"a", "b"} {
		if _, err := st.Publish(ctx, "asyncrl.r.trajectories", []byte(d)); err != nil {
			t.Fatal(err)
		}
	}
	acked := make(chan uint64, 10)
	s, err := st.Consume(ctx, "filter", time.Minute, func(m *transport.StreamMsg) {
		if m.Sequence == 1 {
			if err := m.Ack(); err != nil {
				t.Errorf("ack: %v", err)
			}
			acked <- 1
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-acked:
	case <-ctx.Done():
		t.Fatal("no delivery")
	}
	_ = s.Unsubscribe()
	if err := b1.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("a caller's StoreDir must survive Close: %v", err)
	}

	b2 := embedded(t, func(o *natsbus.Options) { o.StoreDir = dir })
	defer b2.Close()
	st2, err := b2.Stream(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *transport.StreamMsg, 10)
	s2, err := st2.Consume(ctx, "filter", 200*time.Millisecond, func(m *transport.StreamMsg) { got <- m; _ = m.Ack() })
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Unsubscribe()
	select {
	case m := <-got:
		if m.Sequence != 2 || string(m.Data) != "b" {
			t.Fatalf("after restart got seq %d %q, want the unacked seq 2 \"b\"", m.Sequence, m.Data)
		}
	case <-ctx.Done():
		t.Fatal("unacked message not redelivered after restart")
	}
}

func TestTempStoreDirRemovedOnClose(t *testing.T) {
	// A private temp dir: other packages' tests start embedded servers
	// (and their asyncrl-nats-* dirs) in parallel with this one.
	t.Setenv("TMPDIR", t.TempDir())
	before, _ := os.ReadDir(os.TempDir())
	b, err := natsbus.Connect(context.Background(), natsbus.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	st, err := b.Stream(context.Background(), transport.StreamConfig{Name: "T", Subjects: []string{"asyncrl.r.ledger"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Publish(context.Background(), "asyncrl.r.ledger", []byte("x")); err != nil {
		t.Fatal(err)
	}
	created := newTempDirs(t, before)
	if len(created) != 1 {
		t.Fatalf("expected one new asyncrl-nats temp dir, found %v", created)
	}
	url := b.ClientURL()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	u, _ := neturl.Parse(url)
	if c, err := net.DialTimeout("tcp", u.Host, time.Second); err == nil {
		c.Close()
		t.Fatalf("embedded server still accepts connections on %s after Close", u.Host)
	}
	if _, err := os.Stat(created[0]); !os.IsNotExist(err) {
		t.Fatalf("temp store dir %s still exists after Close (err %v)", created[0], err)
	}
}

func newTempDirs(t *testing.T, before []os.DirEntry) []string {
	t.Helper()
	old := map[string]bool{}
	for _, e := range before {
		old[e.Name()] = true
	}
	after, err := os.ReadDir(os.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range after {
		if !old[e.Name()] && strings.HasPrefix(e.Name(), "asyncrl-nats-") {
			out = append(out, os.TempDir()+"/"+e.Name())
		}
	}
	return out
}

func TestOptionsValidation(t *testing.T) {
	for _, o := range []natsbus.Options{
		{MaxPayload: -1},
		{MaxPayload: 1 << 30},
		{MaxReconnects: -2},
		{Port: 70000},
		{DrainTimeout: -time.Second},
		{PendingMsgs: -2},
		{PendingBytes: -2},
		{Cluster: &natsbus.ClusterOptions{Name: "bad name", Listen: "127.0.0.1:0"}},
		{Cluster: &natsbus.ClusterOptions{Name: "c", Listen: "nope", Routes: []string{"nats-route://127.0.0.1:1"}}},
		{Cluster: &natsbus.ClusterOptions{Name: "c", Listen: "127.0.0.1:0"}},
	} {
		if _, err := natsbus.Connect(context.Background(), o); err == nil {
			t.Errorf("Connect(%+v) succeeded, want a validation error", o)
		}
	}
	if err := (natsbus.Options{ReadyTimeout: -time.Second}).Validate(); err == nil || !strings.Contains(err.Error(), "ReadyTimeout -1s") {
		t.Errorf("negative ReadyTimeout: %v, want an error naming ReadyTimeout -1s", err)
	}
}

// TestClusterRoutes joins two embedded servers with routes (each lists both,
// as JetStream clustering wants): a message published on one node reaches a
// subscriber on the other, and a stream is usable from both.
func TestClusterRoutes(t *testing.T) {
	pa, pb := freePort(t), freePort(t)
	routes := []string{"nats-route://127.0.0.1:" + pa, "nats-route://127.0.0.1:" + pb}
	type res struct {
		b   *natsbus.Bus
		err error
	}
	// Both must start together: a clustered JetStream server is ready only
	// once its meta group has formed.
	start := func(name, port string, out chan<- res) {
		opts := natsbus.DefaultOptions()
		opts.Name, opts.StoreDir = name, t.TempDir()
		if os.Getenv("DBG") != "" {
			opts.Logger = zerolog.New(os.Stderr).Level(zerolog.DebugLevel).With().Str("n", name).Logger()
		}
		opts.Cluster = &natsbus.ClusterOptions{Name: "asyncrl", Listen: "127.0.0.1:" + port, Routes: routes}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		b, err := natsbus.Connect(ctx, opts)
		out <- res{b, err}
	}
	ca, cb := make(chan res, 1), make(chan res, 1)
	go start("node-a", pa, ca)
	go start("node-b", pb, cb)
	ra, rb := <-ca, <-cb
	for _, r := range []res{ra, rb} {
		if r.err != nil {
			t.Fatalf("Connect: %v", r.err)
		}
		defer r.b.Close()
	}
	a, b := ra.b, rb.b
	if a.ClusterURL() == "" {
		t.Fatal("ClusterURL empty on a clustered server")
	}
	var got atomic.Value
	if _, err := b.Subscribe("asyncrl.r.steps", func(m *transport.Msg) { got.Store(string(m.Data)) }); err != nil {
		t.Fatal(err)
	}
	// Interest propagates over the route asynchronously; publish until seen.
	bustest.Eventually(t, 10*time.Second, "message across the route", func() bool {
		_ = a.Publish(context.Background(), "asyncrl.r.steps", []byte("across"))
		time.Sleep(5 * time.Millisecond)
		return got.Load() == "across"
	})
	// The JetStream meta group elects a leader a few seconds after the
	// route forms; until then the API does not answer.
	var st transport.Stream
	bustest.Eventually(t, 20*time.Second, "stream on the clustered JetStream", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var err error
		st, err = a.Stream(ctx, transport.StreamConfig{Name: "C", Subjects: []string{"asyncrl.r.ledger"}})
		return err == nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	stB, err := b.Stream(ctx, transport.StreamConfig{Name: "C", Subjects: []string{"asyncrl.r.ledger"}})
	if err != nil {
		t.Fatal(err)
	}
	if seq, err := stB.Publish(ctx, "asyncrl.r.ledger", []byte("x")); err != nil || seq != 1 {
		t.Fatalf("publish from node b: seq %d err %v", seq, err)
	}
	got2 := make(chan string, 1)
	// A fresh bound for the consumer: creating it, like the stream, waits
	// for the clustered JetStream, which may have spent ctx's time above.
	cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer ccancel()
	s, err := st.Consume(cctx, "d", time.Minute, func(m *transport.StreamMsg) { _ = m.Ack(); got2 <- string(m.Data) })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Unsubscribe()
	select {
	case d := <-got2:
		if d != "x" {
			t.Fatalf("got %q", d)
		}
	case <-cctx.Done():
		t.Fatal("stream message from node b not consumed on node a")
	}
}

func freePort(t *testing.T) string { return strconv.Itoa(natstest.FreePort(t)) }

// A port another process holds fails the embedded server's start at once,
// with the bind's own error, and leaves no temporary store behind: the
// server would record the failure, never listen, and the start would wait
// out its readiness bound (60 s here) with no reason given.
func TestEmbeddedServerPortTakenFailsWithTheBindError(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	port := held.Addr().(*net.TCPAddr).Port
	for _, tc := range []struct {
		what string
		set  func(*natsbus.Options)
	}{
		{"client", func(o *natsbus.Options) { o.Port = port }},
		{"cluster", func(o *natsbus.Options) {
			o.Name = "n0"
			o.Cluster = &natsbus.ClusterOptions{Name: "c", Listen: held.Addr().String(), Routes: []string{"nats-route://" + held.Addr().String()}}
		}},
	} {
		o := natsbus.DefaultOptions()
		o.ReadyTimeout = time.Minute
		tc.set(&o)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		b, err := natsbus.Connect(ctx, o)
		cancel()
		if err == nil {
			_ = b.Close()
			t.Fatalf("%s port %d held elsewhere: Connect succeeded", tc.what, port)
		}
		if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), tc.what+" port") {
			t.Errorf("%s port held elsewhere: %v; want the bind's EADDRINUSE naming the %s port", tc.what, err, tc.what)
		}
	}
	if left, _ := os.ReadDir(os.TempDir()); len(left) != 0 {
		t.Errorf("a failed start left %d entries in its temp dir", len(left))
	}
}
