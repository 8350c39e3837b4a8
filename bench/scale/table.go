package scale

import (
	"fmt"
	"strings"
)

// Table renders results as BENCHMARKS.md's markdown table.
func Table(rs []Result) string {
	var b strings.Builder
	b.WriteString("| in flight (peak) | transport | engines | time scale | errors | lost | s (held) | turns/s | RSS MB (base → peak) | RSS KB/traj | heap KB/traj | goroutines/traj | fds peak | router decision p50/p99 ms | filter event p50/p99 ms | controller event p50/p99 ms | bus msg/s | GC pause p99 ms | buffer held at end (msgs, MB) | result |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range rs {
		res := "pass"
		if r.Failure != "" {
			res = "FAIL: " + r.Failure
		}
		tps := 0.0
		if r.Seconds > 0 {
			tps = float64(r.Turns) / r.Seconds
		}
		fmt.Fprintf(&b, "| %d (%d) | %s | %d | %.2g | %d | %d | %.1f (%.0f) | %.0f | %.0f → %.0f | %.1f | %.1f | %.2f | %d | %.2f / %.2f | %.1f / %.1f | %.2f / %.2f | %.0f | %.2f | %d, %.1f | %s |\n",
			r.Level, r.PeakInFlight, r.Transport, r.Engines, r.TimeScale, r.Errors, r.Lost, r.Seconds, r.HoldSeconds, tps, r.RSSBaseMB, r.RSSPeakMB,
			r.RSSPerTrajectoryKB, r.HeapPerTrajectoryKB, r.GoroutinesPerTrajectory, r.FDsPeak,
			r.RouterDecisionP50ms, r.RouterDecisionP99ms, r.FilterEventP50ms, r.FilterEventP99ms,
			r.ControllerEventP50ms, r.ControllerEventP99ms, r.BusMsgsPerSec, r.GCPauseP99ms, r.BufferMsgs, r.BufferMB, res)
	}
	return b.String()
}
