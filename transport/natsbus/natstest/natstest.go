// Package natstest starts clustered embedded NATS servers for tests: the
// JetStream cluster three `asyncrl node` processes would form, in one
// test process.
package natstest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// FreePort returns a free loopback port.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Cluster starts n embedded servers joined by routes, each with JetStream
// on a temporary store, named node-0 … node-<n-1> (their JetStream server
// names), and waits until every one answers. Each bus is closed at the
// end of the test (closing one earlier is a server's death).
func Cluster(t testing.TB, n int) []*natsbus.Bus {
	t.Helper()
	ports := make([]int, n)
	routes := make([]string, n)
	for i := range n {
		ports[i] = FreePort(t)
		routes[i] = "nats-route://127.0.0.1:" + strconv.Itoa(ports[i])
	}
	type res struct {
		i   int
		b   *natsbus.Bus
		err error
	}
	out := make(chan res, n)
	for i := range n {
		go func() {
			o := natsbus.DefaultOptions()
			o.Name, o.StoreDir = fmt.Sprint("node-", i), t.TempDir()
			o.Cluster = &natsbus.ClusterOptions{Name: "asyncrl", Listen: "127.0.0.1:" + strconv.Itoa(ports[i]), Routes: routes}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			b, err := natsbus.Connect(ctx, o)
			out <- res{i, b, err}
		}()
	}
	buses := make([]*natsbus.Bus, n)
	var firstErr error
	for range n {
		r := <-out
		if r.err != nil && firstErr == nil {
			firstErr = r.err
		}
		buses[r.i] = r.b
	}
	for _, b := range buses {
		if b != nil {
			t.Cleanup(func() { _ = b.Close() })
		}
	}
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	return buses
}
