package chaos

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Fault is one scheduled fault.
type Fault struct {
	// At is the offset from the session start.
	At time.Duration `json:"at_ns"`
	// Kind is one of Kinds().
	Kind string `json:"kind"`
	// Engine is the faulted engine's index; -1 for a bus fault.
	Engine int `json:"engine"`
	// Hold is how long the fault lasts (an engine-kill: the downtime; 0
	// for a bus reconnect, which the client heals by itself).
	Hold time.Duration `json:"hold_ns"`
	// Delay is a latency fault's per-chunk delay.
	Delay time.Duration `json:"delay_ns,omitempty"`
	// Effect is filled in when a played fault heals: chunks delayed
	// (latency), connections reset (reset), connections blackholed plus
	// chunks held (blackhole), 1 for a restarted engine. Not part of the
	// schedule.
	Effect int64 `json:"effect"`
}

func (f Fault) String() string {
	if f.Engine < 0 {
		return fmt.Sprintf("%8.3fs %-13s the node's bus connection", f.At.Seconds(), f.Kind)
	}
	s := fmt.Sprintf("%8.3fs %-13s engine %d for %v", f.At.Seconds(), f.Kind, f.Engine, f.Hold.Round(time.Millisecond))
	if f.Kind == KindLatency {
		s += fmt.Sprintf(" (+%v per chunk)", f.Delay.Round(time.Millisecond))
	}
	return s
}

// Schedule draws the session's faults from seed: starts at exponential gaps
// of mean cfg.MeanGap within cfg.Duration, a kind uniformly from the
// enabled ones, a hold in [MaxHold/4, MaxHold], and a target engine among
// those not faulted at that moment; when Engines−1 are faulted the start
// waits until one heals. It is pure: the same config gives the same slice.
func Schedule(cfg Config) []Fault {
	kinds := cfg.kinds()
	if len(kinds) == 0 || cfg.Engines < 2 || cfg.MeanGap <= 0 || cfg.MaxHold <= 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x63686173)) // "chas"
	busyUntil := make([]time.Duration, cfg.Engines)
	var out []Fault
	at := time.Duration(0)
	for {
		at += time.Duration(rng.ExpFloat64() * float64(cfg.MeanGap))
		kind := kinds[rng.IntN(len(kinds))]
		if busKind(kind) {
			if at >= cfg.Duration {
				return out
			}
			out = append(out, Fault{At: at, Kind: kind, Engine: -1}) // instantaneous: the client heals itself
			continue
		}
		// Keep one engine healthy: with this fault at most Engines−1 are
		// faulted, so wait for the earliest heal while Engines−1 already are.
		for cfg.Engines-countBusy(busyUntil, at) < 2 {
			at = nextHeal(busyUntil, at)
		}
		var free []int
		for i, b := range busyUntil {
			if b <= at {
				free = append(free, i)
			}
		}
		if at >= cfg.Duration {
			return out
		}
		f := Fault{At: at, Kind: kind, Engine: free[rng.IntN(len(free))]}
		f.Hold = draw(rng, cfg.MaxHold/4, cfg.MaxHold)
		if f.Kind == KindLatency {
			f.Delay = draw(rng, cfg.Latency/4, cfg.Latency)
		}
		busyUntil[f.Engine] = at + f.Hold
		out = append(out, f)
	}
}

func countBusy(busyUntil []time.Duration, at time.Duration) int {
	n := 0
	for _, b := range busyUntil {
		if b > at {
			n++
		}
	}
	return n
}

// nextHeal is the earliest heal after at.
func nextHeal(busyUntil []time.Duration, at time.Duration) time.Duration {
	next := time.Duration(math.MaxInt64)
	for _, b := range busyUntil {
		if b > at && b < next {
			next = b
		}
	}
	return next
}

// draw is uniform in [lo, hi].
func draw(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}
