// Package natstest starts clustered embedded NATS servers for tests: the
// JetStream cluster three `asyncrl node` processes would form, in one
// test process.
package natstest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/internal/netx"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// FreePort returns a free loopback port, drawn below the kernel's
// ephemeral range (netx.FreePorts says why).
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := netx.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return p[0]
}

// Cluster starts n embedded servers joined by routes, each with JetStream
// on a temporary store, named node-0 … node-<n-1> (their JetStream server
// names), and waits until every one answers. Each bus is closed at the
// end of the test (closing one earlier is a server's death). A route port
// taken between its draw and the server's start (another process named
// it) fails that start at once; the cluster is then started again on
// fresh ports, up to three times.
func Cluster(t testing.TB, n int) []*natsbus.Bus {
	t.Helper()
	for try := 1; ; try++ {
		buses, err := startCluster(t, n)
		if err == nil {
			for _, b := range buses {
				t.Cleanup(func() { _ = b.Close() })
			}
			return buses
		}
		if !errors.Is(err, syscall.EADDRINUSE) || try == 3 {
			t.Fatal(err)
		}
		t.Logf("natstest: cluster start %d: %v; again on fresh ports", try, err)
	}
}

func startCluster(t testing.TB, n int) ([]*natsbus.Bus, error) {
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
	if firstErr != nil {
		for _, b := range buses {
			if b != nil {
				_ = b.Close()
			}
		}
		return nil, firstErr
	}
	return buses, nil
}
