// Package access is the bus's role → subject table: what a node of each
// role may publish and subscribe to, as NATS user permissions.
//
// The table is derived from the subjects the code publishes on (the
// subject builders in transport, cluster/node, cluster/enginehost,
// cluster/rollouthost, cluster/weightsync and the KV buckets of
// cluster/names and cluster/lease); docs/security.md prints it, and the
// cluster/node test TestRoleUsersRunAndRefuse runs a real trainer node and
// a real engine node under these permissions with no violation, then has
// the engine node publish a TrainBatch and sees the server refuse it.
//
// Subjects carry the run id or a term name as their second token
// (asyncrl.<run>.…, asyncrl.<run>-t<token>.…), so the patterns wildcard
// it: a NATS account (or server) per run is the run boundary; these
// permissions bound what one node may do inside it.
//
// It imports transport/natsbus for the permission types and nothing of
// the node.
package access
