package lease

import "errors"

// ErrNotLeader is returned by operations that need the lease. The
// lease's decisions, its Timing, Status and key (Holding), and the fence
// (CheckFence, ErrFenced) are cluster/lease/contender's; callers import
// them from there.
var ErrNotLeader = errors.New("lease: not the holder")
