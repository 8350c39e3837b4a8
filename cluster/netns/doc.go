// Package netns runs asyncrl across hosts for real on one machine: it
// makes Linux network namespaces joined by veth pairs on a bridge, with
// non-loopback addresses (Subnet), and runs commands inside them (`ip
// netns exec`). It is the harness of `make test-netns` (issue 34): three
// `asyncrl node` processes in three namespaces with TLS routes, bus
// credentials, role users, a gossip key and engine keys, an intruder
// namespace whose probes every plane must refuse, and the cluster chaos
// of the loopback tests (a node SIGKILLed, a link cut and healed, netem
// loss and delay) with the ledger check.
//
// # Contract
//
//   - Available says why namespaces cannot be made (not root, no `ip`,
//     the kernel refuses); the tests skip with that message.
//   - New makes one namespace per host plus a hub namespace holding the
//     bridge. Nothing is made in the caller's namespace and no namespace
//     has a default route, so no packet leaves the set.
//   - Close kills every process left inside (by pid, `ip netns pids`) and
//     deletes the namespaces; Sweep (called by New) removes those of an
//     earlier run whose process died before its cleanup.
//   - LinkDown/LinkUp cut and heal one host's link.
//   - Netem gives every direction of every path loss and delay, and says
//     which shaper did it: the kernel's netem qdisc on each host's eth0
//     where the kernel has sch_netem, else (or when asked) the userspace
//     impairer.
//
// # The userspace impairer
//
// For kernels without sch_netem (the development machine's), Netem can
// put every host behind a TUN device instead: each host's address moves
// from its veth to tun0 (a layer-3 device: IP packets, no ARP), whose
// /24 route hands every packet for another host to the test process. The
// device is opened on a locked OS thread moved into the host's namespace
// (setns) and back; its fd then works from anywhere, and the device
// vanishes when the fd is closed. One goroutine per device reads packets
// and offers each to the Link core of its (source, destination)
// direction; a scheduler writes released packets into the destination's
// device. Link is a pure core (no clock, goroutine, lock or I/O; time and
// a seeded *rand.Rand are inputs): it drops with probability Loss and
// releases the rest Delay (± Jitter) later, in arrival order. Packets
// that are not IPv4 for another host of the net are dropped, so nothing
// leaves the namespaces on this path either. ParseNetem reads the
// subset of netem's syntax it applies ("loss 5% delay 50ms [10ms]").
// While it runs the veths carry nothing, so LinkDown/LinkUp refuse.
//
// The tests run only with ASYNCRL_NETNS=1 (make test-netns), as root;
// ASYNCRL_NETNS_NETEM=kernel|userspace picks the shaper (default: the
// kernel's where it exists) and ASYNCRL_NETNS_SEED the impairer's seed.
// The Link core's tests run in make test.
package netns
