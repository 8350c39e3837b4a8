package discovery

import (
	"errors"
	"fmt"
	"time"

	"github.com/asyncrl/asyncrl/actors/router/policy"
)

// Router is what Apply needs from the router: exclusive access to its
// routing core (proxy.Router implements it).
type Router interface {
	Do(f func(now time.Time, c *policy.Core))
}

// Apply applies changes to the router's core in one critical section, so
// a new engine is never routable between its Add and its health and
// version. Changes about replicas the router does not know (removed by an
// operator meanwhile) and duplicate adds are not errors: the table ends up
// as discovery wants it either way. Other errors are joined and returned.
func Apply(r Router, changes []Change) error {
	if len(changes) == 0 {
		return nil
	}
	var errs []error
	r.Do(func(_ time.Time, c *policy.Core) {
		for _, ch := range changes {
			if err := applyOne(c, ch); err != nil {
				errs = append(errs, fmt.Errorf("discovery: %s: %w", ch, err))
			}
		}
	})
	return errors.Join(errs...)
}

func applyOne(c *policy.Core, ch Change) error {
	var err error
	switch ch.Op {
	case OpAdd:
		if err = c.AddReplica(ch.URL); errors.Is(err, policy.ErrDuplicateReplica) {
			err = nil
		}
		return err
	case OpRemove:
		err = c.RemoveReplica(ch.URL)
	case OpHealth:
		err = c.SetHealth(ch.URL, ch.Healthy)
	case OpVersion:
		err = c.SetVersion(ch.URL, ch.Version)
	case OpState:
		err = c.SetState(ch.URL, ch.State)
	case OpMinVersion:
		if ch.Version > c.MinVersion() {
			c.SetMinVersion(ch.Version)
		}
	case OpMetrics:
		err = c.ObserveMetrics(ch.At, ch.URL, ch.Queue, ch.KVUsage)
	default:
		return fmt.Errorf("unknown op %d", ch.Op)
	}
	if errors.Is(err, policy.ErrUnknownReplica) {
		return nil
	}
	return err
}
