//go:build unix

package delta_test

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time (user + system, every thread) this process has
// used. Benchmarks report bytes per CPU-second from it: on a shared machine
// wall-clock MB/s mostly measures the neighbours' load, while CPU time is
// the work the codec itself did, i.e. its per-core speed.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
