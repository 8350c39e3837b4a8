package placement

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Sentinel errors.
var (
	// ErrUnknownRole: a role list names a role that does not exist.
	ErrUnknownRole = errors.New("placement: unknown role")
	// ErrDuplicateNode: two members share a name.
	ErrDuplicateNode = errors.New("placement: duplicate node name")
	// ErrBadNode: a member is malformed (empty name, no roles, negative GPUs).
	ErrBadNode = errors.New("placement: bad node")
)

// Role names.
const (
	All        = "all"
	Bus        = "bus"
	Engine     = "engine"
	Router     = "router"
	Rollout    = "rollout"
	Filter     = "filter"
	Trainer    = "trainer"
	Publisher  = "publisher"
	Controller = "controller"
	// Tinker serves the Tinker API (tinker/server) on the cluster's
	// engines. "all" does not include it: it listens on tinker.listen,
	// so a node runs it only when its --roles name it.
	Tinker = "tinker"
)

// KnownRoles lists every role a node may run, in a fixed order.
func KnownRoles() []string {
	return []string{All, Bus, Engine, Router, Rollout, Filter, Trainer, Publisher, Controller, Tinker}
}

// Singletons lists the roles exactly one node may run at a time, in the
// order they are placed (the publisher and controller follow the trainer).
func Singletons() []string { return []string{Trainer, Publisher, Controller} }

// IsSingleton reports whether role must run on exactly one node.
func IsSingleton(role string) bool { return slices.Contains(Singletons(), role) }

// ParseRoles splits a comma-separated role list ("engine, router"),
// validates every role and drops duplicates, keeping the first order.
// An unknown role is an error listing the known ones.
func ParseRoles(s string) ([]string, error) {
	var out []string
	for _, r := range strings.Split(s, ",") {
		if r = strings.TrimSpace(r); r != "" {
			out = append(out, r)
		}
	}
	return ValidateRoles(out)
}

// ValidateRoles checks roles (case-sensitive) and returns them without
// duplicates. Empty lists are an error: a node must do something.
func ValidateRoles(roles []string) ([]string, error) {
	if len(roles) == 0 {
		return nil, fmt.Errorf("%w: empty role list (known roles: %s)", ErrUnknownRole, strings.Join(KnownRoles(), ", "))
	}
	var bad []string
	seen := map[string]bool{}
	var out []string
	for _, r := range roles {
		if !slices.Contains(KnownRoles(), r) {
			bad = append(bad, fmt.Sprintf("%q", r))
			continue
		}
		if !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("%w: %s (known roles: %s)", ErrUnknownRole, strings.Join(bad, ", "), strings.Join(KnownRoles(), ", "))
	}
	return out, nil
}

// Node is one member as placement sees it.
type Node struct {
	// Name is unique in the cluster.
	Name string
	// Roles the node offers to run (validated with ValidateRoles).
	Roles []string
	// GPUs is the number of GPUs it has.
	GPUs int
}

func (n Node) has(role string) bool {
	return slices.ContainsFunc(n.Roles, func(r string) bool { return r == role || (r == All && role != Tinker) })
}

// ValidateNodes checks every node (name, roles, GPUs) and that names are
// unique, reporting every problem at once.
func ValidateNodes(nodes []Node) error {
	var errs []error
	byName := map[string]int{}
	for i, n := range nodes {
		if n.Name == "" {
			errs = append(errs, fmt.Errorf("%w: node #%d has no name", ErrBadNode, i))
			continue
		}
		if j, ok := byName[n.Name]; ok {
			errs = append(errs, fmt.Errorf("%w: %q is used by node #%d and node #%d (every node needs its own --name)", ErrDuplicateNode, n.Name, j, i))
			continue
		}
		byName[n.Name] = i
		if n.GPUs < 0 {
			errs = append(errs, fmt.Errorf("%w: node %q has %d GPUs (allowed: >= 0)", ErrBadNode, n.Name, n.GPUs))
		}
		if _, err := ValidateRoles(n.Roles); err != nil {
			errs = append(errs, fmt.Errorf("node %q: %w", n.Name, err))
		}
	}
	return errors.Join(errs...)
}

// Assignment is where one singleton role runs.
type Assignment struct {
	Role string
	// Node runs the role; empty when no member is eligible.
	Node string
	// Standbys are the other eligible nodes, best first.
	Standbys []string
	// Why explains the choice (holder kept, most GPUs, with the trainer, …).
	Why string
}

// Plan is the placement of every singleton role.
type Plan struct {
	Assignments []Assignment
}

// Node returns the node a role is placed on ("" when unplaced or unknown).
func (p Plan) Node(role string) string {
	for _, a := range p.Assignments {
		if a.Role == role {
			return a.Node
		}
	}
	return ""
}

// Unplaced lists the singleton roles no member can run.
func (p Plan) Unplaced() []string {
	var out []string
	for _, a := range p.Assignments {
		if a.Node == "" {
			out = append(out, a.Role)
		}
	}
	return out
}

// Place validates nodes and places every singleton role. holders maps a
// role to the node holding its lease now (missing or "" when none).
func Place(nodes []Node, holders map[string]string) (Plan, error) {
	if err := ValidateNodes(nodes); err != nil {
		return Plan{}, err
	}
	sorted := append([]Node(nil), nodes...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	var plan Plan
	for _, role := range Singletons() {
		plan.Assignments = append(plan.Assignments, place(role, sorted, holders, plan))
	}
	return plan, nil
}

func eligible(role string, nodes []Node) []Node {
	var out []Node
	for _, n := range nodes {
		if n.has(role) {
			out = append(out, n)
		}
	}
	if len(out) == 0 && role == Controller {
		return eligible(Trainer, nodes)
	}
	return out
}

func place(role string, nodes []Node, holders map[string]string, sofar Plan) Assignment {
	cands := eligible(role, nodes)
	a := Assignment{Role: role}
	if len(cands) == 0 {
		a.Why = fmt.Sprintf("no member runs %s", role)
		return a
	}
	trainerNode := sofar.Node(Trainer)
	// rank orders candidates best first; it is a total order (name last).
	rank := func(n Node) (int, int) {
		pref := 2
		if role != Trainer && n.Name == trainerNode {
			pref = 1
		}
		if h := holders[role]; h != "" && n.Name == h {
			pref = 0
		}
		gpus := -n.GPUs
		if role == Controller {
			gpus = 0 // the controller needs no GPU
		}
		return pref, gpus
	}
	sort.SliceStable(cands, func(i, j int) bool {
		pi, gi := rank(cands[i])
		pj, gj := rank(cands[j])
		if pi != pj {
			return pi < pj
		}
		if gi != gj {
			return gi < gj
		}
		return cands[i].Name < cands[j].Name
	})
	a.Node = cands[0].Name
	for _, c := range cands[1:] {
		a.Standbys = append(a.Standbys, c.Name)
	}
	p, g := rank(cands[0])
	switch {
	case p == 0:
		a.Why = "holds the lease"
	case p == 1:
		a.Why = "with the trainer"
	case g < 0:
		a.Why = fmt.Sprintf("most GPUs (%d)", -g)
	default:
		a.Why = "first by name"
	}
	return a
}
