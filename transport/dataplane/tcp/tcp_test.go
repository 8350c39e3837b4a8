package tcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport/dataplane"
	"github.com/asyncrl/asyncrl/transport/dataplane/internal/faultconn"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childServer())
	}
	goleak.VerifyTestMain(m)
}

// randomBytes is deterministic so a child process can rebuild the same data.
func randomBytes(seed uint64, n int) dataplane.Buffer {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	r.Read(b)
	return b
}

func plan(t testing.TB, id string, src dataplane.Buffer, chunk int64, alg dataplane.Algorithm) *messages.TransferPlan {
	t.Helper()
	p := &messages.TransferPlan{
		Header:       messages.Header{RunID: "run", Sender: "trainer-0", Version: 7},
		TransferID:   id,
		Source:       "trainer-0",
		Destinations: []string{"engine-0"},
		Ranges:       dataplane.SplitRanges("weights", int64(len(src)), chunk),
	}
	if err := dataplane.Checksum(src, p.Ranges, alg); err != nil {
		t.Fatal(err)
	}
	return p
}

func newBackend(t testing.TB, mut func(*Config)) *Backend {
	t.Helper()
	cfg := DefaultConfig()
	if mut != nil {
		mut(&cfg)
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func publish(t testing.TB, b *Backend, p *messages.TransferPlan, src interface {
	ReadAt([]byte, int64) (int, error)
}) {
	t.Helper()
	o, err := b.Publish(context.Background(), p, src)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	p.URI = o.URI()
}

func TestTransfer64MiBChecksumExact(t *testing.T) {
	for _, alg := range []dataplane.Algorithm{dataplane.XXH3, dataplane.CRC32C} {
		t.Run(string(alg), func(t *testing.T) {
			src := randomBytes(1, 64<<20)
			p := plan(t, "w-64", src, 4<<20, alg)
			server := newBackend(t, nil)
			publish(t, server, p, src)
			if !strings.HasPrefix(p.URI, "tcp://127.0.0.1:") {
				t.Fatalf("URI %q: want loopback by default", p.URI)
			}
			client := newBackend(t, func(c *Config) { c.Streams = 4 })
			dst := make(dataplane.Buffer, len(src))
			res, err := client.Fetch(context.Background(), p, dst)
			if err != nil {
				t.Fatal(err)
			}
			if res.Bytes != int64(len(src)) || res.Reconnects != 0 {
				t.Fatalf("result %+v, want %d bytes and no reconnects", res, len(src))
			}
			if !bytes.Equal(dst, src) {
				t.Fatal("received bytes differ from the source")
			}
			done := dataplane.DoneMessage(p, "engine-0", res)
			if done.TransferID != "w-64" || done.Bytes != int64(len(src)) || done.Version != 7 {
				t.Fatalf("done message %s", done)
			}
		})
	}
}

// A file source goes through sendfile; a file sink through WriteAt.
func TestTransferFileToFile(t *testing.T) {
	dir := t.TempDir()
	src := randomBytes(2, 24<<20+12345) // not a multiple of the range size
	srcPath := filepath.Join(dir, "src")
	if err := os.WriteFile(srcPath, src, 0o600); err != nil {
		t.Fatal(err)
	}
	sf, err := os.Open(srcPath)
	if err != nil {
		t.Fatal(err)
	}
	defer sf.Close()
	df, err := os.Create(filepath.Join(dir, "dst"))
	if err != nil {
		t.Fatal(err)
	}
	defer df.Close()
	p := plan(t, "file", src, 3<<20, dataplane.XXH3)
	server := newBackend(t, func(c *Config) { c.ChunkBytes = 1 << 20 })
	publish(t, server, p, sf)
	client := newBackend(t, func(c *Config) { c.Streams = 3; c.ChunkBytes = 256 << 10 })
	if _, err := client.Fetch(context.Background(), p, df); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(df.Name())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, src) {
		t.Fatal("file copy differs")
	}
}

func TestKilledConnectionsResume(t *testing.T) {
	src := randomBytes(3, 32<<20)
	p := plan(t, "resume", src, 8<<20, dataplane.XXH3)
	server := newBackend(t, nil)
	publish(t, server, p, src)
	var dials atomic.Int32
	client := newBackend(t, func(c *Config) {
		c.Streams = 2
		c.Backoff = time.Millisecond
		c.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// The first three connections die after 3 MiB: inside a range.
			if dials.Add(1) <= 3 {
				return faultconn.KillAfter(conn, 3<<20), nil
			}
			return conn, nil
		}
	})
	dst := make(dataplane.Buffer, len(src))
	res, err := client.Fetch(context.Background(), p, dst)
	if err != nil {
		t.Fatal(err)
	}
	if res.Reconnects != 3 {
		t.Fatalf("reconnects %d, want 3", res.Reconnects)
	}
	// Resumed ranges continue at the break: nothing is received twice.
	if res.Bytes != int64(len(src)) {
		t.Fatalf("received %d bytes, want exactly %d (no re-sent bytes)", res.Bytes, len(src))
	}
	if !bytes.Equal(dst, src) {
		t.Fatal("bytes differ after resumption")
	}
}

// The server drops every connection mid-transfer; the fetch resumes. Reads
// pause once 2 MiB arrived until the drop happened, so the drop lands
// mid-transfer however the scheduler runs the test.
func TestServerDropResumes(t *testing.T) {
	src := randomBytes(4, 16<<20)
	p := plan(t, "drop", src, 4<<20, dataplane.XXH3)
	// The limit keeps the server from running far ahead into socket buffers.
	server := newBackend(t, func(c *Config) { c.BytesPerSecond = 64 << 20; c.ChunkBytes = 256 << 10 })
	publish(t, server, p, src)
	g := &gate{reached: make(chan struct{}), release: make(chan struct{})}
	client := newBackend(t, func(c *Config) {
		c.Backoff = time.Millisecond
		c.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			return &gateConn{Conn: conn, g: g}, err
		}
	})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(g.release)
		select {
		case <-g.reached:
			server.DropConnections()
		case <-time.After(10 * time.Second):
		}
	}()
	dst := make(dataplane.Buffer, len(src))
	res, err := client.Fetch(context.Background(), p, dst)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if res.Reconnects == 0 {
		t.Fatal("no reconnect: the drop did not happen mid-transfer")
	}
	if !bytes.Equal(dst, src) {
		t.Fatal("bytes differ after server-side drop")
	}
}

type gate struct {
	read    atomic.Int64
	once    sync.Once
	reached chan struct{}
	release chan struct{}
}

type gateConn struct {
	net.Conn
	g *gate
}

func (c *gateConn) Read(p []byte) (int, error) {
	if c.g.read.Load() >= 2<<20 {
		c.g.once.Do(func() { close(c.g.reached) })
		<-c.g.release
	}
	n, err := c.Conn.Read(p)
	c.g.read.Add(int64(n))
	return n, err
}

func TestReconnectsExhausted(t *testing.T) {
	src := randomBytes(5, 8<<20)
	p := plan(t, "flaky", src, 4<<20, dataplane.XXH3)
	server := newBackend(t, nil)
	publish(t, server, p, src)
	client := newBackend(t, func(c *Config) {
		c.MaxReconnects = 2
		c.Backoff = time.Millisecond
		c.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			return faultconn.KillAfter(conn, 1<<20), err
		}
	})
	dst := make(dataplane.Buffer, len(src))
	_, err := client.Fetch(context.Background(), p, dst)
	if !errors.Is(err, dataplane.ErrIncomplete) {
		t.Fatalf("err %v, want ErrIncomplete", err)
	}
}

func TestCorruptedRangeDetected(t *testing.T) {
	src := randomBytes(6, 8<<20)
	p := plan(t, "corrupt", src, 1<<20, dataplane.XXH3)
	src[3<<20+17] ^= 0x40 // the source changed after its checksums were taken
	server := newBackend(t, nil)
	publish(t, server, p, src)
	client := newBackend(t, nil)
	_, err := client.Fetch(context.Background(), p, make(dataplane.Buffer, len(src)))
	if !errors.Is(err, dataplane.ErrChecksum) {
		t.Fatalf("err %v, want ErrChecksum", err)
	}
	var re *dataplane.RangeError
	if !errors.As(err, &re) || re.Index != 3 {
		t.Fatalf("err %v, want a RangeError for range 3", err)
	}
	if f := dataplane.FailedMessage(p, "engine-0", err); f.Range != 3 || f.TransferID != "corrupt" {
		t.Fatalf("failed message %s", f)
	}
}

func TestUnknownTransferAfterOfferClosed(t *testing.T) {
	src := randomBytes(7, 1<<20)
	p := plan(t, "gone", src, 1<<20, dataplane.XXH3)
	server := newBackend(t, nil)
	o, err := server.Publish(context.Background(), p, src)
	if err != nil {
		t.Fatal(err)
	}
	p.URI = o.URI()
	o.Close()
	client := newBackend(t, nil)
	if _, err := client.Fetch(context.Background(), p, make(dataplane.Buffer, len(src))); !errors.Is(err, dataplane.ErrUnknownTransfer) {
		t.Fatalf("err %v, want ErrUnknownTransfer", err)
	}
	if _, err := server.Publish(context.Background(), p, src); err != nil {
		t.Fatalf("republish after close: %v", err)
	}
	if _, err := server.Publish(context.Background(), p, src); !errors.Is(err, dataplane.ErrBadPlan) {
		t.Fatalf("duplicate publish: err %v, want ErrBadPlan", err)
	}
}

func TestFetchCanceled(t *testing.T) {
	src := randomBytes(8, 8<<20)
	p := plan(t, "slow", src, 1<<20, dataplane.XXH3)
	server := newBackend(t, func(c *Config) { c.BytesPerSecond = 1 << 20; c.ChunkBytes = 64 << 10 })
	publish(t, server, p, src)
	client := newBackend(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := client.Fetch(ctx, p, make(dataplane.Buffer, len(src)))
	if !errors.Is(err, dataplane.ErrIncomplete) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want ErrIncomplete wrapping the deadline", err)
	}
}

func TestBadPlans(t *testing.T) {
	client := newBackend(t, nil)
	dst := make(dataplane.Buffer, 16)
	for name, p := range map[string]*messages.TransferPlan{
		"no uri":     {TransferID: "x", Ranges: []messages.ByteRange{{Length: 4}}},
		"wrong uri":  {TransferID: "x", URI: "shm:///dev/shm/x", Ranges: []messages.ByteRange{{Length: 4}}},
		"overlap":    {TransferID: "x", URI: "tcp://127.0.0.1:1/x", Ranges: []messages.ByteRange{{Length: 4}, {Offset: 2, Length: 4}}},
		"bad digest": {TransferID: "x", URI: "tcp://127.0.0.1:1/x", Ranges: []messages.ByteRange{{Length: 4, Checksum: "md5:00"}}},
	} {
		if _, err := client.Fetch(context.Background(), p, dst); !errors.Is(err, dataplane.ErrBadPlan) {
			t.Errorf("%s: err %v, want ErrBadPlan", name, err)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for name, mut := range map[string]func(*Config){
		"Streams":        func(c *Config) { c.Streams = 0 },
		"ChunkBytes":     func(c *Config) { c.ChunkBytes = 10 },
		"BytesPerSecond": func(c *Config) { c.BytesPerSecond = -1 },
		"MaxReconnects":  func(c *Config) { c.MaxReconnects = -1 },
		"IOTimeout":      func(c *Config) { c.IOTimeout = 0 },
		"Addr":           func(c *Config) { c.Addr = "" },
	} {
		cfg := DefaultConfig()
		mut(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: err %v, want one naming the field", name, err)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestBucket(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := bucket{rate: 100, burst: 50}
	for i, tc := range []struct {
		at   time.Duration
		n    int
		wait time.Duration
	}{
		{0, 50, 0},                      // the first burst is free
		{0, 10, 100 * time.Millisecond}, // 10 bytes in debt at 100 B/s
		{100 * time.Millisecond, 0, 0},  // the debt is paid
		{600 * time.Millisecond, 50, 0}, // refilled to burst, not beyond
		{600 * time.Millisecond, 100, time.Second},
	} {
		if got := b.take(t0.Add(tc.at), tc.n); got != tc.wait {
			t.Errorf("step %d: wait %v, want %v", i, got, tc.wait)
		}
	}
}

const childEnv = "ASYNCRL_DATAPLANE_TCP_CHILD"

// childServer publishes deterministic bytes, prints the URI and serves
// until its stdin closes.
func childServer() int {
	src := randomBytes(9, 8<<20)
	p := &messages.TransferPlan{TransferID: "child", Ranges: dataplane.SplitRanges("w", int64(len(src)), 1<<20)}
	b, err := New(DefaultConfig())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer b.Close()
	o, err := b.Publish(context.Background(), p, src)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(o.URI())
	var one [1]byte
	os.Stdin.Read(one[:])
	return 0
}

func TestChildProcessServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = outW
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	outW.Close()
	defer func() {
		stdin.Close()
		cmd.Wait()
	}()
	line := make([]byte, 256)
	n, err := outR.Read(line)
	outR.Close()
	if err != nil {
		t.Fatalf("child printed nothing: %v", err)
	}
	out.Write(line[:n])
	src := randomBytes(9, 8<<20)
	p := plan(t, "child", src, 1<<20, dataplane.XXH3)
	p.URI = strings.TrimSpace(out.String())
	client := newBackend(t, nil)
	dst := make(dataplane.Buffer, len(src))
	if _, err := client.Fetch(context.Background(), p, dst); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst, src) {
		t.Fatal("bytes from the child differ")
	}
}

// A client whose plan disagrees with what the server published (a range
// the server does not have) gets a refusal, not retries.
func TestServerRefusesRangesOutsidePublished(t *testing.T) {
	src := randomBytes(10, 2<<20)
	p := plan(t, "mismatch", src, 1<<20, dataplane.XXH3)
	server := newBackend(t, nil)
	publish(t, server, p, src)
	q := *p
	q.Ranges = []messages.ByteRange{{Offset: 0, Length: 2 << 20}} // one range spanning both published ones
	client := newBackend(t, func(c *Config) { c.Backoff = time.Millisecond })
	res, err := client.Fetch(context.Background(), &q, make(dataplane.Buffer, len(src)))
	var re *dataplane.RangeError
	if !errors.As(err, &re) || re.Index != 0 || !strings.Contains(err.Error(), "outside range 0") {
		t.Fatalf("err %v, want a refusal of range 0", err)
	}
	if res.Reconnects != 0 {
		t.Fatalf("refusal retried %d times", res.Reconnects)
	}
}

// Fetches reuse idle connections; connections the server closed while they
// sat in the pool are redialled without counting as breaks.
func TestConnectionsPooledAcrossFetches(t *testing.T) {
	src := randomBytes(11, 4<<20)
	p := plan(t, "pooled", src, 1<<20, dataplane.XXH3)
	server := newBackend(t, nil)
	publish(t, server, p, src)
	var dials atomic.Int32
	// One stream, so the dial count does not depend on scheduling.
	client := newBackend(t, func(c *Config) {
		c.Streams = 1
		c.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}
	})
	fetch := func() dataplane.Result {
		t.Helper()
		dst := make(dataplane.Buffer, len(src))
		res, err := client.Fetch(context.Background(), p, dst)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(dst, src) {
			t.Fatal("bytes differ")
		}
		return res
	}
	fetch()
	fetch()
	if n := dials.Load(); n != 1 {
		t.Fatalf("%d dials for two fetches over 1 stream, want 1 (second fetch pooled)", n)
	}
	server.DropConnections()
	if res := fetch(); res.Reconnects != 0 {
		t.Fatalf("stale pooled connections counted as %d breaks", res.Reconnects)
	}
	if n := dials.Load(); n != 2 {
		t.Fatalf("%d dials after the server dropped the idle connection, want 2", n)
	}
}

func TestAdvertisedHost(t *testing.T) {
	src := randomBytes(12, 1<<20)
	p := plan(t, "adv", src, 1<<20, dataplane.XXH3)
	server := newBackend(t, func(c *Config) { c.Advertise = "localhost" })
	publish(t, server, p, src)
	_, port, _ := net.SplitHostPort(server.Addr())
	if p.URI != "tcp://localhost:"+port+"/adv" {
		t.Fatalf("URI %q, want the advertised host", p.URI)
	}
	dst := make(dataplane.Buffer, len(src))
	if _, err := newBackend(t, nil).Fetch(context.Background(), p, dst); err != nil || !bytes.Equal(dst, src) {
		t.Fatalf("fetch via advertised host: %v", err)
	}
}

// Closing an Offer interrupts its in-flight sends and returns only when
// nothing reads the source any more: the caller may reuse the memory at
// once (the race detector checks that), and the fetch fails cleanly.
func TestOfferCloseStopsInflightSends(t *testing.T) {
	src := randomBytes(13, 4<<20)
	p := plan(t, "withdrawn", src, 1<<20, dataplane.XXH3)
	server := newBackend(t, func(c *Config) { c.BytesPerSecond = 4 << 20; c.ChunkBytes = 64 << 10 })
	o, err := server.Publish(context.Background(), p, src)
	if err != nil {
		t.Fatal(err)
	}
	p.URI = o.URI()
	// Reads pause after 2 MiB until the offer is closed, so the close lands
	// mid-transfer however the scheduler runs the test.
	g := &gate{reached: make(chan struct{}), release: make(chan struct{})}
	client := newBackend(t, func(c *Config) {
		c.Backoff = time.Millisecond
		c.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			return &gateConn{Conn: conn, g: g}, err
		}
	})
	errc := make(chan error, 1)
	go func() {
		_, err := client.Fetch(context.Background(), p, make(dataplane.Buffer, len(src)))
		errc <- err
	}()
	select {
	case <-g.reached: // 2 MiB arrived: sends are in flight
	case err := <-errc:
		t.Fatalf("fetch ended before the offer closed: %v", err)
	case <-time.After(10 * time.Second):
		close(g.release)
		t.Fatal("no bytes arrived")
	}
	o.Close()
	clear(src) // safe: Close waited for every send reading src
	close(g.release)
	if err := <-errc; !errors.Is(err, dataplane.ErrUnknownTransfer) {
		t.Fatalf("fetch of a withdrawn transfer: %v, want ErrUnknownTransfer", err)
	}
}
