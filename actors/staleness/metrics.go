package staleness

import "time"

// Metrics is a snapshot of the controller's counters and derived values,
// read by the shell (which exports them) and by tests.
type Metrics struct {
	Step, Version int64
	// SkyRL's counters. Accepted includes trained groups (see StepDone).
	Submitted, Running, Accepted, Filtered int64
	// Aborted groups, groups dropped for staleness and groups released
	// untrained (Release) — all requeued.
	Aborted, StaleDropped, Released int64
	// Trained groups (CheckForTraining said Train).
	Trained int64
	// Violations: groups trained beyond the bound (PolicyAccept only).
	Violations int64
	// FutureVersions: groups whose oldest token was newer than the trainer
	// (a version message raced ahead of StepDone); staleness clamped to 0.
	FutureVersions int64
	Capacity       int64
	// Staleness of trained groups: mean, max and a histogram where
	// StalenessHistogram[k] counts staleness k for k ≤ S and the last
	// bucket counts staleness > S.
	StalenessMean      float64
	StalenessMax       int64
	StalenessHistogram []int64
	// EngineIdle is worker-time with no group generating: the integral
	// of (W − running) over the time between the first and last event.
	EngineIdle time.Duration
	// EngineBlocked is the part of EngineIdle during which Capacity() ≤ 0,
	// i.e. idleness caused by the staleness bound (not by a slow source).
	EngineBlocked time.Duration
	// TrainerIdle is time the trainer waited for data: from the start and
	// from each StepDone until the step's B-th group passed CheckForTraining.
	TrainerIdle time.Duration
}

// Metrics returns a snapshot; the histogram is a copy.
func (c *Controller) Metrics() Metrics {
	m := Metrics{
		Step: c.step, Version: c.Version(),
		Submitted: c.submitted, Running: c.running, Accepted: c.accepted, Filtered: c.filtered,
		Aborted: c.aborted, StaleDropped: c.staleDropped, Released: c.released, Trained: c.trained,
		Violations: c.violations, FutureVersions: c.futureVersions, Capacity: c.Capacity(),
		StalenessMax:       c.stale.max,
		StalenessHistogram: append([]int64(nil), c.stale.hist...),
		EngineIdle:         c.idle.engineIdle,
		EngineBlocked:      c.idle.engineBlocked,
		TrainerIdle:        c.idle.trainerIdle,
	}
	if c.stale.n > 0 {
		m.StalenessMean = float64(c.stale.sum) / float64(c.stale.n)
	}
	return m
}

type stalenessStats struct {
	n, sum, max int64
	hist        []int64 // len S+2
}

func (s *stalenessStats) observe(lag int64) {
	s.n++
	s.sum += lag
	s.max = max(s.max, lag)
	b := min(lag, int64(len(s.hist)-1))
	s.hist[b]++
}

// idleClock integrates idle time between the timestamps the caller passes
// in. Time never goes backwards here: an earlier timestamp than the last
// one adds nothing (a shell with a non-monotonic clock loses accuracy,
// not correctness).
type idleClock struct {
	started       bool
	last          time.Time
	trainerBusy   bool
	engineIdle    time.Duration
	engineBlocked time.Duration
	trainerIdle   time.Duration
}

func (k *idleClock) advance(now time.Time, idleWorkers int64, blocked bool) {
	if !k.started {
		k.started, k.last = true, now
		return
	}
	dt := now.Sub(k.last)
	if dt <= 0 {
		return
	}
	k.last = now
	k.engineIdle += time.Duration(idleWorkers) * dt
	if blocked {
		k.engineBlocked += time.Duration(idleWorkers) * dt
	}
	if !k.trainerBusy {
		k.trainerIdle += dt
	}
}

func (k *idleClock) trainerFed()     { k.trainerBusy = true }
func (k *idleClock) trainerStarved() { k.trainerBusy = false }
