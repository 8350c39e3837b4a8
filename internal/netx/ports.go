package netx

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// FreePorts returns n distinct loopback ports that were free when checked,
// for a listener that must be told its port before it starts (a NATS
// route, a test cluster's node). They are drawn below the kernel's
// ephemeral range (/proc/sys/net/ipv4/ip_local_port_range), because a
// port the kernel handed out for :0 and that was then closed can be handed
// out again at once — to another process's listener on :0 or to an
// outgoing connection's local end — before its new owner binds it; a port
// below the range is only ever taken by someone who names it. No port is
// returned twice by one process. Where the range leaves no room below it
// the kernel's own choice is used.
func FreePorts(n int) ([]int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	lo := ephemeralLow()
	const floor = 10000
	out := make([]int, 0, n)
	for len(out) < n {
		p, err := pickPort(floor, lo)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

var (
	portsMu   sync.Mutex
	portsGave = map[int]bool{}
)

func pickPort(floor, lo int) (int, error) {
	if lo-floor >= 1000 {
		for range 200 {
			p := floor + rand.IntN(lo-floor)
			if portsGave[p] {
				continue
			}
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				continue // taken: draw again
			}
			_ = l.Close()
			portsGave[p] = true
			return p, nil
		}
	}
	for range 200 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("netx: free port: %w", err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if !portsGave[p] {
			portsGave[p] = true
			return p, nil
		}
	}
	return 0, fmt.Errorf("netx: free port: no free loopback port found")
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux),
// or IANA's 49152 where it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 49152
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 49152
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil || lo <= 0 {
		return 49152
	}
	return lo
}
