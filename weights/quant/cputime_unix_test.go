//go:build unix

package quant_test

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time (user + system) this process has used: on a
// shared machine wall-clock MB/s mostly measures the neighbours' load, so
// the benchmarks also report MB per CPU-second (as weights/delta's do).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
