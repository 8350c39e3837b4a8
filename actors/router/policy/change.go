package policy

import (
	"fmt"
	"strconv"
	"time"
)

// Change is one typed change to the routing table. Every component that
// changes the table (discovery, the publisher shell, the node agent, the
// admin API) sends these to the core through Step — the proxy's
// Router.Apply — instead of calling its setters, so each change is a value
// that can be logged, recorded and checked, and its error is returned to
// the sender. The set is closed: AddReplica, RemoveReplica, SetHealth,
// SetState, SetVersion, SetMinVersion, RaiseMinVersion, ObserveMetrics.
type Change interface {
	// Replica is the URL the change is about ("" for a table-wide one).
	Replica() string
	fmt.Stringer
	apply(now time.Time, c *Core) error
}

// AddReplica adds URL healthy and active, serving Version (0 unless set).
// ErrDuplicateReplica if it is present.
type AddReplica struct {
	URL     string
	Version int64
}

// RemoveReplica removes URL and forgets its sessions. ErrUnknownReplica if
// it is absent.
type RemoveReplica struct{ URL string }

// SetHealth marks URL healthy or not (resetting its probe streaks).
type SetHealth struct {
	URL     string
	Healthy bool
}

// SetState sets URL's serving state.
type SetState struct {
	URL   string
	State State
}

// SetVersion records the weight version URL serves (acknowledged).
type SetVersion struct {
	URL     string
	Version int64
}

// SetMinVersion sets the minimum version a replica must serve to take
// traffic, up or down.
type SetMinVersion struct{ Version int64 }

// RaiseMinVersion sets the minimum version to Version if that is higher;
// a lower one is ignored (announcements may arrive out of order).
type RaiseMinVersion struct{ Version int64 }

// ObserveMetrics records URL's own queue length and KV usage (0–1) as
// scraped at At; a zero At means the step's now.
type ObserveMetrics struct {
	URL     string
	Queue   int
	KVUsage float64
	At      time.Time
}

// Step applies one change at now. A change either applies whole or fails
// with an error that names it and wraps the cause (ErrUnknownReplica,
// ErrDuplicateReplica, …), leaving the table as it was.
func (c *Core) Step(now time.Time, ch Change) error {
	if ch == nil {
		return fmt.Errorf("policy: nil change")
	}
	if err := ch.apply(now, c); err != nil {
		return &ChangeError{Change: ch, Err: err}
	}
	return nil
}

// ChangeError is a change the core refused, and why.
type ChangeError struct {
	Change Change
	Err    error
}

func (e *ChangeError) Error() string { return "policy: " + e.Change.String() + ": " + e.Err.Error() }

// Unwrap returns the cause, so errors.Is(err, ErrUnknownReplica) works.
func (e *ChangeError) Unwrap() error { return e.Err }

func (a AddReplica) apply(_ time.Time, c *Core) error {
	if err := c.AddReplica(a.URL); err != nil {
		return err
	}
	return c.SetVersion(a.URL, a.Version)
}

func (r RemoveReplica) apply(_ time.Time, c *Core) error { return c.RemoveReplica(r.URL) }
func (h SetHealth) apply(_ time.Time, c *Core) error     { return c.SetHealth(h.URL, h.Healthy) }
func (v SetVersion) apply(_ time.Time, c *Core) error    { return c.SetVersion(v.URL, v.Version) }

func (s SetState) apply(_ time.Time, c *Core) error { return c.SetState(s.URL, s.State) }

func (m SetMinVersion) apply(_ time.Time, c *Core) error {
	c.SetMinVersion(m.Version)
	return nil
}

func (m RaiseMinVersion) apply(_ time.Time, c *Core) error {
	if m.Version > c.minVersion {
		c.SetMinVersion(m.Version)
	}
	return nil
}

func (m ObserveMetrics) apply(now time.Time, c *Core) error {
	at := m.At
	if at.IsZero() {
		at = now
	}
	return c.ObserveMetrics(at, m.URL, m.Queue, m.KVUsage)
}

func (a AddReplica) Replica() string     { return a.URL }
func (r RemoveReplica) Replica() string  { return r.URL }
func (h SetHealth) Replica() string      { return h.URL }
func (s SetState) Replica() string       { return s.URL }
func (v SetVersion) Replica() string     { return v.URL }
func (SetMinVersion) Replica() string    { return "" }
func (RaiseMinVersion) Replica() string  { return "" }
func (m ObserveMetrics) Replica() string { return m.URL }
func (a AddReplica) String() string {
	return "add " + a.URL + " version " + strconv.FormatInt(a.Version, 10)
}
func (r RemoveReplica) String() string { return "remove " + r.URL }
func (h SetHealth) String() string     { return "health " + h.URL + " " + strconv.FormatBool(h.Healthy) }
func (s SetState) String() string      { return "state " + s.URL + " " + s.State.String() }
func (v SetVersion) String() string {
	return "version " + v.URL + " " + strconv.FormatInt(v.Version, 10)
}
func (m SetMinVersion) String() string { return "min_version " + strconv.FormatInt(m.Version, 10) }
func (m RaiseMinVersion) String() string {
	return "raise min_version " + strconv.FormatInt(m.Version, 10)
}
func (m ObserveMetrics) String() string {
	return fmt.Sprintf("metrics %s queue %d kv %.2f", m.URL, m.Queue, m.KVUsage)
}
