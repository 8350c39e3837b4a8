package sim

import (
	"fmt"
	"math/rand"
	"time"
)

// workload is the run's shape, drawn from the seed.
type workload struct {
	// S, B, W: staleness bound, mini-batch size (groups per step),
	// parallel generation workers (groups generating at once).
	S, B, W int64
	// N is the group size (trajectories per prompt).
	N int
	// Engines is the number of engines.
	Engines int
	// MaxLag is the publisher's routing lag (0: only the newest version
	// is routable; 1: one behind too).
	MaxLag int64
	// MaxTurns bounds the turns per episode (1..MaxTurns each).
	MaxTurns int
	// TrainTime is the modelled duration of one training step.
	TrainTime time.Duration
	// Horizon is roughly how long the run lasts; faults are drawn within it.
	Horizon time.Duration
}

func (wl workload) String() string {
	return fmt.Sprintf("S=%d B=%d W=%d n=%d engines=%d max_lag=%d max_turns=%d train=%v",
		wl.S, wl.B, wl.W, wl.N, wl.Engines, wl.MaxLag, wl.MaxTurns, wl.TrainTime)
}

// drawWorkload draws a small but non-trivial loop: tight staleness bounds
// and small batches so that the bound, the filter and requeues all bite
// within a few steps.
func drawWorkload(rng *rand.Rand, cfg Config) workload {
	wl := workload{
		S:        1 + rng.Int63n(3),
		B:        2 + rng.Int63n(2),
		N:        2 + rng.Intn(2),
		Engines:  2 + rng.Intn(3),
		MaxLag:   rng.Int63n(2),
		MaxTurns: 1 + rng.Intn(3),
	}
	// B ≤ W ≤ B·(S+1), capped at 2B+1 so per-seed work stays small.
	hi := min(wl.B*(wl.S+1), 2*wl.B+1)
	wl.W = wl.B + rng.Int63n(hi-wl.B+1)
	if cfg.Engines > 0 {
		wl.Engines = cfg.Engines
	}
	wl.TrainTime = time.Duration(200+rng.Intn(300)) * time.Millisecond
	wl.Horizon = time.Duration(cfg.Steps) * time.Second
	return wl
}
