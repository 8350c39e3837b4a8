package cluster

import "github.com/asyncrl/asyncrl/cluster/placement"

// PlacementNodes turns live members into placement's input (name, roles
// from the gossiped metadata, GPU count), so every node computes the same
// placement.Place from its own Members().
func PlacementNodes(members []Member) []placement.Node {
	out := make([]placement.Node, 0, len(members))
	for _, m := range members {
		out = append(out, placement.Node{Name: m.Name, Roles: append([]string(nil), m.Meta.Roles...), GPUs: m.Meta.GPUs})
	}
	return out
}
