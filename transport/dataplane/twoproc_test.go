package dataplane_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport/dataplane"
	"github.com/asyncrl/asyncrl/transport/dataplane/internal/faultconn"
	"github.com/asyncrl/asyncrl/transport/dataplane/shm"
	"github.com/asyncrl/asyncrl/transport/dataplane/tcp"
)

// The two-process acceptance test: a child process (this test binary,
// re-executed) publishes the bytes; the test process fetches them.
const (
	// childEnv names the backend the child publishes on ("tcp", "shm").
	childEnv = "ASYNCRL_DATAPLANE_TEST_CHILD"
	// childBytesEnv is the transfer size the child publishes.
	childBytesEnv = "ASYNCRL_DATAPLANE_TEST_BYTES"
	// oneGiBEnv=1 runs the acceptance size, 1 GiB (a few seconds and
	// ~3 GiB of memory); by default the same test moves 16 MiB so that
	// `make test` stays small.
	oneGiBEnv = "ASYNCRL_DATAPLANE_1GIB"
)

func TestMain(m *testing.M) {
	if kind := os.Getenv(childEnv); kind != "" {
		os.Exit(childSource(kind))
	}
	goleak.VerifyTestMain(m)
}

// fillSeeded writes the deterministic stream both processes can rebuild.
func fillSeeded(b []byte) { rand.NewChaCha8([32]byte{7, 7}).Read(b) }

// childSource publishes size seeded bytes on kind, prints the plan (with
// its URI and xxh3 per range) as one JSON line, and serves until its stdin
// closes.
func childSource(kind string) int {
	die := func(err error) int { fmt.Fprintln(os.Stderr, "child:", err); return 1 }
	n, err := strconv.Atoi(os.Getenv(childBytesEnv))
	if err != nil || n <= 0 {
		return die(fmt.Errorf("%s=%q", childBytesEnv, os.Getenv(childBytesEnv)))
	}
	src := make(dataplane.Buffer, n)
	fillSeeded(src)
	p := &messages.TransferPlan{
		Header:     messages.Header{RunID: "twoproc", Sender: "trainer-0", Version: 1},
		TransferID: "twoproc-" + kind, Source: "trainer-0", Destinations: []string{"engine-0"},
		Ranges: dataplane.SplitRanges("weights", int64(n), max(int64(n)/16, 1<<20)),
	}
	if err := dataplane.Checksum(src, p.Ranges, dataplane.XXH3); err != nil {
		return die(err)
	}
	var b interface {
		dataplane.Backend
		Close() error
	}
	switch kind {
	case "tcp":
		b, err = tcp.New(tcp.DefaultConfig())
	case "shm":
		b, err = shm.New(shm.DefaultConfig())
	default:
		err = fmt.Errorf("unknown backend %q", kind)
	}
	if err != nil {
		return die(err)
	}
	defer b.Close()
	o, err := b.Publish(context.Background(), p, src)
	if err != nil {
		return die(err)
	}
	defer o.Close()
	p.URI = o.URI()
	if err := json.NewEncoder(os.Stdout).Encode(p); err != nil {
		return die(err)
	}
	if kind == "tcp" {
		// The baseline, side by side: the same bytes as one plain write on
		// one connection (no framing, checksums or resumption).
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return die(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Write(src)
				c.Close()
			}
		}()
		fmt.Println(ln.Addr())
	}
	io.Copy(io.Discard, os.Stdin) // serve until the parent is done
	return 0
}

// startSource runs the child and returns its plan, and for tcp the address
// of its plain single-stream sender; the child exits when the test ends.
func startSource(t *testing.T, kind string, n int) (*messages.TransferPlan, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+kind, childBytesEnv+"="+strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	r := bufio.NewReader(stdout)
	line, err := r.ReadBytes('\n')
	if err != nil {
		t.Fatalf("the source process printed no plan: %v", err)
	}
	var p messages.TransferPlan
	if err := json.Unmarshal(line, &p); err != nil {
		t.Fatalf("plan %q: %v", line, err)
	}
	if len(p.Ranges) == 0 || p.Ranges[0].Checksum == "" {
		t.Fatalf("plan without checksums: %+v", p)
	}
	if kind != "tcp" {
		return &p, ""
	}
	addr, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("the source process printed no plain address: %v", err)
	}
	return &p, strings.TrimSpace(addr)
}

// checkSeeded compares dst with the seeded stream, rebuilt a MiB at a time
// (independently of the child's checksums, which Fetch already verified).
func checkSeeded(t *testing.T, dst []byte) {
	t.Helper()
	r := rand.NewChaCha8([32]byte{7, 7})
	want := make([]byte, 1<<20)
	for off := 0; off < len(dst); off += len(want) {
		w := want[:min(len(want), len(dst)-off)]
		r.Read(w)
		if !bytes.Equal(dst[off:off+len(w)], w) {
			t.Fatalf("bytes differ in the MiB at offset %d", off)
		}
	}
}

// cancelingSink cancels the fetch once more than left bytes were written.
type cancelingSink struct {
	dst    dataplane.Buffer
	left   atomic.Int64
	cancel context.CancelFunc
}

func (s *cancelingSink) WriteAt(p []byte, off int64) (int, error) {
	if s.left.Add(-int64(len(p))) < 0 {
		s.cancel()
	}
	return s.dst.WriteAt(p, off)
}

func transferSize(t *testing.T) int {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	if os.Getenv(oneGiBEnv) == "1" {
		return 1 << 30
	}
	return 16 << 20
}

func gbps(n int, d time.Duration) float64 { return float64(n) / d.Seconds() / 1e9 }

// TCP between two processes: the first two connections die a quarter of
// a range in; the fetch resumes where each broke, arrives checksum-exact,
// and a second, undisturbed fetch gives the throughput, next to a plain
// single-stream copy of the same bytes from the same process.
func TestTwoProcessTCP(t *testing.T) {
	n := transferSize(t)
	p, plainAddr := startSource(t, "tcp", n)
	var dials atomic.Int32
	cfg := tcp.DefaultConfig()
	cfg.Backoff = time.Millisecond
	cfg.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil || dials.Add(1) > 2 {
			return conn, err
		}
		return faultconn.KillAfter(conn, p.Ranges[0].Length/4), nil
	}
	b, err := tcp.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	dst := make(dataplane.Buffer, n)
	start := time.Now()
	res, err := b.Fetch(context.Background(), p, dst)
	killed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if res.Reconnects != 2 || res.Bytes != int64(n) {
		t.Fatalf("reconnects %d, bytes %d; want 2 and exactly %d (resumed, nothing re-sent)", res.Reconnects, res.Bytes, n)
	}
	checkSeeded(t, dst)

	clear(dst)
	start = time.Now()
	if res, err = b.Fetch(context.Background(), p, dst); err != nil || res.Reconnects != 0 {
		t.Fatalf("second fetch: %v, %d reconnects", err, res.Reconnects)
	}
	clean := time.Since(start)
	checkSeeded(t, dst)

	clear(dst)
	conn, err := net.Dial("tcp", plainAddr)
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	_, err = io.ReadFull(conn, dst)
	plain := time.Since(start)
	conn.Close()
	if err != nil {
		t.Fatalf("plain copy: %v", err)
	}
	checkSeeded(t, dst)
	t.Logf("tcp, 2 processes, %d MiB: data plane (%d streams, xxh3) %.2f GB/s undisturbed = %.2f× plain single-stream copy (%.2f GB/s); %.2f GB/s with 2 connections killed and resumed",
		n>>20, cfg.Streams, gbps(n, clean), plain.Seconds()/clean.Seconds(), gbps(n, plain), gbps(n, killed))
}

// Shared memory between two processes: a fetch stopped a third of the
// way in reports ErrIncomplete; fetching again (the child's file is still
// published) arrives checksum-exact. shm has no connection to lose: the
// retry re-reads every range (no per-range resume), at memory speed.
func TestTwoProcessSHM(t *testing.T) {
	n := transferSize(t)
	p, _ := startSource(t, "shm", n)
	b, err := shm.New(shm.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	dst := make(dataplane.Buffer, n)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sink := &cancelingSink{dst: dst, cancel: cancel}
	sink.left.Store(int64(n) / 3)
	if _, err := b.Fetch(ctx, p, sink); !errors.Is(err, dataplane.ErrIncomplete) || !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted fetch: err %v, want ErrIncomplete wrapping context.Canceled", err)
	}
	start := time.Now()
	res, err := b.Fetch(context.Background(), p, dst)
	retry := time.Since(start)
	if err != nil || res.Bytes != int64(n) {
		t.Fatalf("fetch after the interruption: %v, %d bytes; want %d", err, res.Bytes, n)
	}
	checkSeeded(t, dst)

	clear(dst)
	start = time.Now()
	if _, err := b.Fetch(context.Background(), p, dst); err != nil {
		t.Fatalf("second fetch: %v", err)
	}
	clean := time.Since(start)
	checkSeeded(t, dst)
	t.Logf("shm, 2 processes, %d MiB, %d workers: %.2f GB/s undisturbed, %.2f GB/s for the retry after an interrupted fetch (into a partly untouched buffer)",
		n>>20, shm.DefaultConfig().Workers, gbps(n, clean), gbps(n, retry))
}
