// Package cluster holds membership (memberlist), role placement, leadership
// leases and the node agent that starts a node's role actors.
//
// This package: gossip membership (JoinCluster) and the partition rule
// (DecideQuorum, Quorum — a pure core: a side of a partition trains only
// with a strict majority of the known members, dead nodes staying known).
// Subpackages:
//
//   - cluster/lease: singleton-role leases on JetStream KV with fencing tokens;
//   - cluster/discovery: engine announcements + membership → router table changes;
//   - cluster/placement: role-list and node-name validation, singleton placement;
//   - cluster/ledger: the durable prompt ledger, group buffer and trainer progress;
//   - cluster/node: the node agent.
//
// docs/cluster.md is the design and the failure-detection bounds.
package cluster
