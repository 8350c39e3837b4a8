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
//   - LinkDown/LinkUp cut and heal one host's link; Netem shapes every
//     link (ErrNoNetem on a kernel without sch_netem).
//
// The tests run only with ASYNCRL_NETNS=1 (make test-netns), as root.
package netns
