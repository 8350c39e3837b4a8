// Package placement decides where roles run: it validates a node's role
// list and the cluster's node names, and places the singleton roles
// (trainer, publisher, staleness controller) on one node each.
//
// # Contract
//
// Everything here is pure: the inputs are the members (name, roles, GPU
// count) and the current lease holders; the output is a Plan. Same input,
// same plan, on every node — so every node can compute the plan locally
// and agree without talking.
//
// A singleton runs on the node that holds its lease when that node is
// still eligible (moving a healthy trainer costs a checkpoint reload);
// otherwise on the best eligible node: for the trainer the one with the
// most GPUs; for the publisher the trainer's node if eligible (weights are
// there), else the one with the most GPUs; for the controller the
// trainer's node if eligible, else any. Ties break by name, ascending. The
// other eligible nodes are the standbys, in the same order: they contend
// for the lease and take over when the holder dies.
//
// A node is eligible for a role when it lists the role or "all". The
// staleness controller role ("controller") falls back to the nodes that
// run the trainer when no node lists it.
package placement
