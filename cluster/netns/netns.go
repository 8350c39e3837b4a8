package netns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrUnavailable: this machine cannot make network namespaces (not root,
// no `ip`, or the kernel refuses). Tests skip with its message.
var ErrUnavailable = errors.New("netns: network namespaces unavailable")

// ErrNoNetem: the kernel has no netem qdisc (sch_netem), so links cannot
// be given loss and delay; tests that need it skip with its message.
var ErrNoNetem = errors.New("netns: tc netem unavailable")

// prefix starts every namespace name this package makes; the owning
// process's pid follows, so a later run can tell a dead run's leftovers
// (Sweep) from a live one's.
const prefix = "arlnt-"

// Subnet is the hosts' network: host i (0-based) is Subnet + (i+1), /24.
const Subnet = "10.77.0."

// Net is a set of network namespaces, one per host, each with one veth
// (eth0, Subnet+i) plugged into a bridge that lives in a namespace of its
// own (the hub). Nothing is made in the caller's namespace and no
// namespace has a route out: traffic stays between the hosts.
type Net struct {
	id    string // prefix + pid
	Hosts []string
	hub   string

	imp    *impairer // the userspace impairer, when Netem started it
	shaped bool      // Netem put kernel qdiscs on the links
}

// Available reports why namespaces cannot be made here (nil: they can):
// it needs root and `ip`, and makes and deletes one namespace.
func Available() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: needs root (run make test-netns as root)", ErrUnavailable)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("%w: no `ip` command (iproute2): %w", ErrUnavailable, err)
	}
	probe := prefix + strconv.Itoa(os.Getpid()) + "-probe"
	if out, err := exec.Command("ip", "netns", "add", probe).CombinedOutput(); err != nil {
		return fmt.Errorf("%w: ip netns add: %v: %s", ErrUnavailable, err, bytes.TrimSpace(out))
	}
	_ = exec.Command("ip", "netns", "del", probe).Run()
	return nil
}

// New makes one namespace per host name, wired to the hub's bridge.
// On error everything made so far is removed.
func New(hosts ...string) (n *Net, err error) {
	Sweep()
	n = &Net{id: prefix + strconv.Itoa(os.Getpid()), Hosts: hosts}
	n.hub = n.NS("hub")
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	if err := run("ip", "netns", "add", n.hub); err != nil {
		return nil, err
	}
	if err := n.in(n.hub, "ip link add br0 type bridge", "ip link set br0 up", "ip link set lo up"); err != nil {
		return nil, err
	}
	for i, h := range hosts {
		ns := n.NS(h)
		if err := run("ip", "netns", "add", ns); err != nil {
			return nil, err
		}
		// The pair is made in the hub, its other end moved straight into
		// the host's namespace: never in the caller's.
		if err := n.in(n.hub, "ip link add "+vethName(h)+" type veth peer name eth0 netns "+ns,
			"ip link set "+vethName(h)+" master br0", "ip link set "+vethName(h)+" up"); err != nil {
			return nil, err
		}
		if err := n.in(ns, "ip link set lo up", "ip addr add "+n.Addr(i)+"/24 dev eth0", "ip link set eth0 up"); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// vethName is host h's veth end in the hub (15 bytes at most).
func vethName(h string) string { return "h-" + h }

// NS is host h's namespace name.
func (n *Net) NS(h string) string { return n.id + "-" + h }

// Addr is host i's address.
func (n *Net) Addr(i int) string { return Subnet + strconv.Itoa(i+1) }

// AddrOf is host h's address ("" for a host not in the net).
func (n *Net) AddrOf(h string) string {
	for i, x := range n.Hosts {
		if x == h {
			return n.Addr(i)
		}
	}
	return ""
}

// Command runs name with args inside host h's namespace (ip netns exec
// execs it: the process's pid is the command's own).
func (n *Net) Command(h, name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.NS(h), name}, args...)...)
}

// CommandContext is Command with a context that kills the process.
func (n *Net) CommandContext(ctx context.Context, h, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.NS(h), name}, args...)...)
}

// LinkDown cuts host h off the bridge (its hub-side veth down): packets
// to and from it are lost until LinkUp, as a pulled cable.
func (n *Net) LinkDown(h string) error {
	if n.imp != nil {
		return errImpairerLinks
	}
	return n.in(n.hub, "ip link set "+vethName(h)+" down")
}

// LinkUp heals LinkDown.
func (n *Net) LinkUp(h string) error {
	if n.imp != nil {
		return errImpairerLinks
	}
	return n.in(n.hub, "ip link set "+vethName(h)+" up")
}

// errImpairerLinks: with the userspace impairer the veths carry nothing,
// so cutting one would cut nothing; refuse rather than pretend.
var errImpairerLinks = errors.New("netns: LinkDown/LinkUp with the userspace impairer: the veths carry no traffic (use the kernel's netem, or no netem, to cut links)")

// NetemOptions say how Netem shapes the links.
type NetemOptions struct {
	// Mode: NetemAuto (the kernel's netem qdisc where the kernel has
	// sch_netem, else the userspace impairer), NetemKernel or
	// NetemUserspace.
	Mode string
	// Seed seeds the userspace impairer's decisions (one stream per
	// direction of every pair of hosts); the kernel's netem has its own.
	Seed uint64
}

// Netem modes (NetemOptions.Mode).
const (
	NetemAuto      = ""
	NetemKernel    = "kernel"
	NetemUserspace = "userspace"
)

// Netem gives every path between two hosts loss and delay, spec in tc
// netem's words (e.g. "loss 5% delay 50ms"): each direction of every
// path crosses it once, so a round trip sees the delay twice. It returns
// which shaper ran ("kernel netem qdisc" or "userspace impairer"), for
// the test log.
//
// The kernel path puts a netem qdisc on every host's eth0 (its egress);
// it fails with ErrNoNetem on a kernel without sch_netem. The userspace
// path (ParseNetem's subset: loss and delay with jitter) moves every
// host's address onto a TUN device whose packets this process routes
// between the hosts through a Link core per direction; the bridge then
// carries nothing, and LinkDown/LinkUp refuse (cut the impairer's
// hosts by other means). Close stops it. Netem is called once per Net.
func (n *Net) Netem(spec string, o NetemOptions) (how string, err error) {
	if n.imp != nil || n.shaped {
		return "", fmt.Errorf("netns: Netem called twice on one net")
	}
	switch o.Mode {
	case NetemKernel:
		return "kernel netem qdisc", n.netemKernel(spec)
	case NetemUserspace:
	case NetemAuto:
		err := n.netemKernel(spec)
		if err == nil {
			return "kernel netem qdisc", nil
		}
		if !errors.Is(err, ErrNoNetem) {
			return "", err
		}
	default:
		return "", fmt.Errorf("netns: netem mode %q: want %q, %q or %q (auto)", o.Mode, NetemKernel, NetemUserspace, NetemAuto)
	}
	im, err := ParseNetem(spec)
	if err != nil {
		return "", err
	}
	if n.imp, err = startImpairer(n, im, o.Seed); err != nil {
		return "", err
	}
	return fmt.Sprintf("userspace impairer (TUN, %s, seed %d)", im, o.Seed), nil
}

// netemKernel puts a netem qdisc on every host's eth0; a kernel without
// sch_netem fails on the first host, before any link is shaped.
func (n *Net) netemKernel(spec string) error {
	if _, err := exec.LookPath("tc"); err != nil {
		return fmt.Errorf("%w: no `tc` command (iproute2): %w", ErrNoNetem, err)
	}
	for _, h := range n.Hosts {
		if err := n.in(n.NS(h), "tc qdisc add dev eth0 root netem "+spec); err != nil {
			if strings.Contains(err.Error(), "unknown") || strings.Contains(err.Error(), "No such file") {
				return fmt.Errorf("%w: the kernel has no netem qdisc (sch_netem): %w", ErrNoNetem, err)
			}
			return err
		}
	}
	n.shaped = true
	return nil
}

// ImpairStats says, for the userspace impairer, how many packets each
// direction carried and dropped ("" with the kernel's netem or none).
func (n *Net) ImpairStats() string {
	if n.imp == nil {
		return ""
	}
	return n.imp.stats()
}

// Close kills every process left in the namespaces (by pid, as `ip netns
// pids` lists them) and deletes the namespaces; safe to call twice.
func (n *Net) Close() {
	if n.imp != nil {
		n.imp.stop()
	}
	for _, h := range append(append([]string(nil), n.Hosts...), "hub") {
		removeNS(n.NS(h))
	}
}

// Sweep removes the namespaces of runs whose process is gone (a test
// killed before its cleanup ran), with the processes left in them.
func Sweep() {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat("/proc/" + pidStr); err == nil && pid > 0 {
			continue // its run is alive
		}
		removeNS(name)
	}
}

func removeNS(ns string) {
	if out, err := exec.Command("ip", "netns", "pids", ns).Output(); err == nil {
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	// A killed process may take a moment to leave; the delete of a
	// namespace still in use fails, so retry briefly.
	for range 20 {
		if exec.Command("ip", "netns", "del", ns).Run() == nil {
			return
		}
		if _, err := os.Stat("/run/netns/" + ns); os.IsNotExist(err) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// in runs each command line (split on spaces) inside namespace ns.
func (n *Net) in(ns string, lines ...string) error {
	for _, l := range lines {
		if err := run("ip", append([]string{"netns", "exec", ns}, strings.Fields(l)...)...); err != nil {
			return err
		}
	}
	return nil
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("netns: %s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}
