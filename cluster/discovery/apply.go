package discovery

import (
	"errors"
	"fmt"

	"github.com/asyncrl/asyncrl/actors/router/policy"
)

// Router is what Apply needs from the router: a step of its routing core
// with typed changes, errors returned (proxy.Router implements it).
type Router interface {
	Apply(changes ...policy.Change) error
}

// Apply applies changes to the router's core in one step, so a new engine
// is never routable between its Add and its health and version. Changes
// about replicas the router does not know (removed by an operator
// meanwhile) and duplicate adds are not errors: the table ends up as
// discovery wants it either way. Other errors are joined and returned.
func Apply(r Router, changes []Change) error {
	if len(changes) == 0 {
		return nil
	}
	pcs := make([]policy.Change, 0, len(changes))
	var errs []error
	for _, ch := range changes {
		pc, err := ch.policyChange()
		if err != nil {
			errs = append(errs, fmt.Errorf("discovery: %s: %w", ch, err))
			continue
		}
		pcs = append(pcs, pc)
	}
	for _, err := range split(r.Apply(pcs...)) {
		if !tolerated(err) {
			errs = append(errs, fmt.Errorf("discovery: %w", err))
		}
	}
	return errors.Join(errs...)
}

// policyChange is the router's typed change for ch.
func (ch Change) policyChange() (policy.Change, error) {
	switch ch.Op {
	case OpAdd:
		return policy.AddReplica{URL: ch.URL}, nil
	case OpRemove:
		return policy.RemoveReplica{URL: ch.URL}, nil
	case OpHealth:
		return policy.SetHealth{URL: ch.URL, Healthy: ch.Healthy}, nil
	case OpVersion:
		return policy.SetVersion{URL: ch.URL, Version: ch.Version}, nil
	case OpState:
		return policy.SetState{URL: ch.URL, State: ch.State}, nil
	case OpMinVersion:
		return policy.RaiseMinVersion{Version: ch.Version}, nil
	case OpMetrics:
		return policy.ObserveMetrics{URL: ch.URL, Queue: ch.Queue, KVUsage: ch.KVUsage, At: ch.At}, nil
	}
	return nil, fmt.Errorf("unknown op %d", ch.Op)
}

// split returns the errors a joined error holds (err itself otherwise).
func split(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// tolerated: a duplicate add, or a change about a replica the router does
// not know (other than adding one with an empty URL).
func tolerated(err error) bool {
	var ce *policy.ChangeError
	if !errors.As(err, &ce) {
		return false
	}
	if _, add := ce.Change.(policy.AddReplica); add {
		return errors.Is(err, policy.ErrDuplicateReplica)
	}
	return errors.Is(err, policy.ErrUnknownReplica)
}
