package lease

import (
	"errors"
	"time"

	"github.com/asyncrl/asyncrl/cluster/lease/contender"
)

// The lease's decisions live in cluster/lease/contender (the core the
// simulator steps); these are the names the elector's users have always
// imported from here, the same types and values.
type (
	// Timing is contender.Timing: the decision logic's configuration.
	Timing = contender.Timing
	// Status is contender.Status: what a contender knows about its lease.
	Status = contender.Status
	// Holding is contender.Holding: what the lease key says.
	Holding = contender.Holding
)

// Sentinel errors.
var (
	// ErrBadConfig is returned for an invalid Timing or Config.
	ErrBadConfig = contender.ErrBadConfig
	// ErrFenced is returned when a write carries a fencing token older than
	// one the store has already seen: the writer was deposed.
	ErrFenced = contender.ErrFenced
	// ErrNotLeader is returned by operations that need the lease.
	ErrNotLeader = errors.New("lease: not the holder")
)

// DefaultTiming returns timing for ttl with the documented defaults
// (contender.DefaultTiming).
func DefaultTiming(ttl time.Duration) Timing { return contender.DefaultTiming(ttl) }

// CheckFence admits a write carrying token when it is not older than the
// largest token the store has seen (contender.CheckFence).
func CheckFence(stored, token uint64) error { return contender.CheckFence(stored, token) }
