package dataplane_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"

	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport/dataplane"
	"github.com/asyncrl/asyncrl/transport/dataplane/shm"
	"github.com/asyncrl/asyncrl/transport/dataplane/tcp"
)

// benchBytes is the transfer size: ASYNCRL_DATAPLANE_BENCH_BYTES (e.g.
// 1073741824 for the 1 GiB figures in docs/dataplanes.md), default 64 MiB.
func benchBytes(b *testing.B) int {
	if s := os.Getenv("ASYNCRL_DATAPLANE_BENCH_BYTES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			b.Fatalf("ASYNCRL_DATAPLANE_BENCH_BYTES=%q: want a positive byte count", s)
		}
		return n
	}
	return 64 << 20
}

var (
	benchOnce sync.Once
	benchSrc  dataplane.Buffer
)

func source(b *testing.B) dataplane.Buffer {
	n := benchBytes(b)
	benchOnce.Do(func() {
		benchSrc = make(dataplane.Buffer, n)
		rand.NewChaCha8([32]byte{42}).Read(benchSrc)
	})
	return benchSrc
}

// benchPlan cuts the source into 16 ranges (at least 1 MiB each).
func benchPlan(b *testing.B, src dataplane.Buffer, alg dataplane.Algorithm) *messages.TransferPlan {
	chunk := max(int64(len(src))/16, 1<<20)
	p := &messages.TransferPlan{TransferID: fmt.Sprintf("bench-%s-%d", alg, len(src)), Ranges: dataplane.SplitRanges("w", int64(len(src)), chunk)}
	if alg != "" {
		if err := dataplane.Checksum(src, p.Ranges, alg); err != nil {
			b.Fatal(err)
		}
	}
	return p
}

// BenchmarkMemmove is the ceiling: one copy() of the same size.
func BenchmarkMemmove(b *testing.B) {
	src := source(b)
	dst := make([]byte, len(src))
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		copy(dst, src)
	}
}

// BenchmarkChecksum is the cost of verifying (xxh3, crc32c) alone.
func BenchmarkChecksum(b *testing.B) {
	src := source(b)
	for _, alg := range []dataplane.Algorithm{dataplane.XXH3, dataplane.CRC32C} {
		b.Run(string(alg), func(b *testing.B) {
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				dataplane.Sum(alg, src)
			}
		})
	}
}

// BenchmarkPlainTCPCopy is the baseline: loopback connections with
// io.Copy on the sender and io.ReadFull on the receiver, no framing or
// checksums; conns=1 is the plain single-stream copy, conns=4 splits the
// bytes over four connections.
func BenchmarkPlainTCPCopy(b *testing.B) {
	src := source(b)
	for _, conns := range []int{1, 4} {
		b.Run(fmt.Sprintf("conns=%d", conns), func(b *testing.B) {
			plainCopy(b, src, conns)
		})
	}
}

func plainCopy(b *testing.B, src []byte, conns int) {
	dst := make([]byte, len(src))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	part := len(src) / conns
	var wg sync.WaitGroup
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			var hdr [1]byte
			for {
				if _, err := io.ReadFull(c, hdr[:]); err != nil {
					return
				}
				i := int(hdr[0])
				if _, err := io.Copy(c, bytes.NewReader(src[i*part:(i+1)*part])); err != nil {
					return
				}
			}
		}()
	}
	cs := make([]net.Conn, conns)
	for i := range cs {
		if cs[i], err = net.Dial("tcp", ln.Addr().String()); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(part * conns))
	for b.Loop() {
		var rg sync.WaitGroup
		for i, c := range cs {
			rg.Add(1)
			go func() {
				defer rg.Done()
				c.Write([]byte{byte(i)})
				if _, err := io.ReadFull(c, dst[i*part:(i+1)*part]); err != nil {
					b.Error(err)
				}
			}()
		}
		rg.Wait()
	}
	for _, c := range cs {
		c.Close()
	}
	ln.Close()
	wg.Wait()
}

// BenchmarkTCP fetches the source over the TCP data plane with 1..8
// streams and xxh3-verified ranges (and once without checksums).
func BenchmarkTCP(b *testing.B) {
	src := source(b)
	for _, tc := range []struct {
		streams int
		alg     dataplane.Algorithm
	}{{1, dataplane.XXH3}, {2, dataplane.XXH3}, {4, dataplane.XXH3}, {8, dataplane.XXH3}, {4, ""}} {
		name := fmt.Sprintf("streams=%d/%s", tc.streams, tc.alg)
		if tc.alg == "" {
			name = fmt.Sprintf("streams=%d/nochecksum", tc.streams)
		}
		b.Run(name, func(b *testing.B) {
			cfg := tcp.DefaultConfig()
			cfg.Streams = tc.streams
			be, err := tcp.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer be.Close()
			p := benchPlan(b, src, tc.alg)
			o, err := be.Publish(context.Background(), p, src)
			if err != nil {
				b.Fatal(err)
			}
			defer o.Close()
			p.URI = o.URI()
			dst := make(dataplane.Buffer, len(src))
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				if _, err := be.Fetch(context.Background(), p, dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSHM: fetch (map, copy, verify) of a published file, and the
// whole publish+fetch round.
func BenchmarkSHM(b *testing.B) {
	src := source(b)
	dir, err := os.MkdirTemp("/dev/shm", "asyncrl-bench-")
	if err != nil {
		b.Skip("no /dev/shm:", err)
	}
	defer os.RemoveAll(dir)
	for _, workers := range []int{1, 4} {
		cfg := shm.DefaultConfig()
		cfg.Dir, cfg.Workers = dir, workers
		be, err := shm.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		p := benchPlan(b, src, dataplane.XXH3)
		dst := make(dataplane.Buffer, len(src))
		b.Run(fmt.Sprintf("fetch/workers=%d", workers), func(b *testing.B) {
			o, err := be.Publish(context.Background(), p, src)
			if err != nil {
				b.Fatal(err)
			}
			defer o.Close()
			p.URI = o.URI()
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				if _, err := be.Fetch(context.Background(), p, dst); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("publish+fetch/workers=%d", workers), func(b *testing.B) {
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				o, err := be.Publish(context.Background(), p, src)
				if err != nil {
					b.Fatal(err)
				}
				p.URI = o.URI()
				if _, err := be.Fetch(context.Background(), p, dst); err != nil {
					b.Fatal(err)
				}
				o.Close()
			}
		})
	}
}
