// Package cluster holds membership (memberlist), role placement, leadership
// leases and the node agent that starts a node's role actors.
package cluster
