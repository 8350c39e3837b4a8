package netns

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

// tunDev is the TUN device the userspace impairer makes in every host.
const tunDev = "tun0"

// impairer is the userspace link impairer's shell: it owns one TUN
// device per host, reads each IP packet a host sends, and hands it to
// the Link core of its (source, destination) pair, which drops it or
// holds it; a scheduler writes every released packet into the
// destination host's TUN device. The cores decide; this only does the
// I/O and the timer. Packets that are not IPv4 to another host of the
// net are dropped: nothing reaches anything outside the namespaces.
type impairer struct {
	tuns  []*os.File
	addrs map[[4]byte]int // a host's IPv4 address → its index

	mu    sync.Mutex
	links map[[2]int]*Link // (source, destination) host index → its core

	wake chan struct{} // a packet was held: the scheduler re-arms its timer
	done chan struct{}
	wg   sync.WaitGroup
}

// startImpairer puts every host of n behind a TUN device: each host's
// address moves from its veth (eth0) to tun0, whose /24 route sends every
// packet for another host to this process. seed seeds one random stream
// per direction of every pair, so a run replays its decisions for the
// same packets. On error nothing is left running (Close removes the
// namespaces; closing the files removes the devices).
func startImpairer(n *Net, im Impairment, seed uint64) (_ *impairer, err error) {
	m := &impairer{addrs: map[[4]byte]int{}, links: map[[2]int]*Link{},
		wake: make(chan struct{}, 1), done: make(chan struct{})}
	defer func() {
		if err != nil {
			m.stop()
		}
	}()
	for i, h := range n.Hosts {
		f, err := openTUN(n.NS(h), tunDev)
		if err != nil {
			return nil, err
		}
		m.tuns = append(m.tuns, f)
		var a [4]byte
		if _, err := fmt.Sscanf(n.Addr(i), "%d.%d.%d.%d", &a[0], &a[1], &a[2], &a[3]); err != nil {
			return nil, fmt.Errorf("netns: address %s: %w", n.Addr(i), err)
		}
		m.addrs[a] = i
		for j := range n.Hosts {
			if j != i {
				m.links[[2]int{i, j}] = NewLink(im, rand.New(rand.NewPCG(seed, uint64(i)<<8|uint64(j))))
			}
		}
	}
	// The devices exist: move each host's address onto its own. The
	// veth stays up without an address, so the bridge carries nothing.
	for i, h := range n.Hosts {
		cidr := n.Addr(i) + "/24"
		if err := n.in(n.NS(h), "ip addr del "+cidr+" dev eth0", "ip link set "+tunDev+" up",
			"ip addr add "+cidr+" dev "+tunDev); err != nil {
			return nil, err
		}
	}
	for i := range m.tuns {
		m.wg.Add(1)
		go m.read(i)
	}
	m.wg.Add(1)
	go m.schedule()
	return m, nil
}

// read offers every packet host i sends to its link's core.
func (m *impairer) read(i int) {
	defer m.wg.Done()
	buf := make([]byte, 65536)
	for {
		k, err := m.tuns[i].Read(buf)
		if err != nil {
			return // closed by stop
		}
		p := buf[:k]
		if k < 20 || p[0]>>4 != 4 {
			continue // not IPv4 (an IPv6 router solicitation, say)
		}
		j, ok := m.addrs[[4]byte(p[16:20])]
		if !ok || j == i {
			continue // no such host: nothing leaves the net
		}
		m.mu.Lock()
		_, dropped := m.links[[2]int{i, j}].Offer(time.Now(), append([]byte(nil), p...))
		m.mu.Unlock()
		if !dropped {
			select {
			case m.wake <- struct{}{}:
			default:
			}
		}
	}
}

// schedule writes each released packet into its destination's device
// and sleeps until the next release or a newly held packet.
func (m *impairer) schedule() {
	defer m.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	type out struct {
		dst  int
		pkts [][]byte
	}
	for {
		var due []out
		var next time.Time
		m.mu.Lock()
		now := time.Now()
		for k, l := range m.links {
			if p := l.Due(now); len(p) > 0 {
				due = append(due, out{k[1], p})
			}
			if at, ok := l.Next(); ok && (next.IsZero() || at.Before(next)) {
				next = at
			}
		}
		m.mu.Unlock()
		for _, o := range due {
			for _, p := range o.pkts {
				// A write error is a lost packet, as a full queue would be.
				_, _ = m.tuns[o.dst].Write(p)
			}
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = max(time.Until(next), 0)
		}
		timer.Reset(wait)
		select {
		case <-m.done:
			return
		case <-m.wake:
		case <-timer.C:
		}
	}
}

// stats says, per direction, how many packets were offered and dropped.
func (m *impairer) stats() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var s []string
	for k, l := range m.links {
		if l.Offered > 0 {
			s = append(s, fmt.Sprintf("%d→%d %d/%d dropped (%.1f%%)", k[0]+1, k[1]+1, l.Dropped, l.Offered,
				100*float64(l.Dropped)/float64(l.Offered)))
		}
	}
	sort.Strings(s)
	return strings.Join(s, ", ")
}

// counts is the total offered and dropped over every direction.
func (m *impairer) counts() (offered, dropped int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, l := range m.links {
		offered, dropped = offered+l.Offered, dropped+l.Dropped
	}
	return offered, dropped
}

// stop ends the goroutines and closes the devices (which removes them).
func (m *impairer) stop() {
	select {
	case <-m.done:
		return
	default:
		close(m.done)
	}
	for _, f := range m.tuns {
		_ = f.Close()
	}
	m.wg.Wait()
}
