package cluster

import (
	"testing"

	"github.com/asyncrl/asyncrl/cluster/placement"
)

func TestPlacementNodesFeedPlace(t *testing.T) {
	members := []Member{
		{Name: "n1", Meta: NodeMeta{Roles: []string{"engine", "trainer"}, GPUs: 2}},
		{Name: "n2", Meta: NodeMeta{Roles: []string{"trainer", "publisher"}, GPUs: 8}},
	}
	nodes := PlacementNodes(members)
	if len(nodes) != 2 || nodes[1].Name != "n2" || nodes[1].GPUs != 8 || len(nodes[0].Roles) != 2 {
		t.Fatalf("nodes %+v", nodes)
	}
	nodes[0].Roles[0] = "changed"
	if members[0].Meta.Roles[0] != "engine" {
		t.Fatal("PlacementNodes aliases the members' role slices")
	}
	p, err := placement.Place(PlacementNodes(members), nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Node(placement.Trainer) != "n2" || p.Node(placement.Publisher) != "n2" {
		t.Fatalf("plan %+v", p)
	}
	members = append(members, Member{Name: "n1", Meta: NodeMeta{Roles: []string{"engine"}}})
	if _, err := placement.Place(PlacementNodes(members), nil); err == nil {
		t.Fatal("duplicate member names accepted")
	}
}
