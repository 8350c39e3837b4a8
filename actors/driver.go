package actors

import "time"

// Driver runs a core synchronously on a ManualClock, with no actor system:
// for core unit tests, golden files and deterministic simulation. It carries
// out effects the way a shell does (timers armed, re-armed, cancelled and
// fired as Tick; everything else recorded) but on the caller's goroutine, so
// a run is a pure function of its inputs. Not safe for concurrent use.
type Driver[In, Out any] struct {
	Core  Core[In, Out]
	Clock *ManualClock
	// Sends, Metrics and Logs accumulate every effect carried out so far;
	// tests may read or reset them.
	Sends   []Send[Out]
	Metrics []Metric
	Logs    []Log
	// Ticks records the timers fired, in order.
	Ticks []string

	timers map[string]func() bool
}

// NewDriver wraps core, calling its Start (if any) at clock's now.
func NewDriver[In, Out any](core Core[In, Out], clock *ManualClock) *Driver[In, Out] {
	d := &Driver[In, Out]{Core: core, Clock: clock, timers: map[string]func() bool{}}
	if s, ok := core.(Starter); ok {
		s.Start(clock.Now())
		d.apply(clock.Now(), core.Drain())
	}
	return d
}

// Step steps the core with in at the clock's now and carries out its effects.
func (d *Driver[In, Out]) Step(in In) {
	now := d.Clock.Now()
	d.Core.Step(now, in)
	d.apply(now, d.Core.Drain())
}

// Advance moves the clock by dur, ticking the core for every timer that
// comes due, in deadline order, with now equal to each deadline.
func (d *Driver[In, Out]) Advance(dur time.Duration) { d.Clock.Advance(dur) }

// Armed reports the names of the core's armed timers.
func (d *Driver[In, Out]) Armed() []string {
	out := make([]string, 0, len(d.timers))
	for n := range d.timers {
		out = append(out, n)
	}
	return out
}

func (d *Driver[In, Out]) apply(now time.Time, eff Effects[Out]) {
	d.Logs = append(d.Logs, eff.Logs...)
	d.Metrics = append(d.Metrics, eff.Metrics...)
	var due []func()
	for _, t := range eff.Timers {
		if stop, ok := d.timers[t.Name]; ok {
			stop()
			delete(d.timers, t.Name)
		}
		if t.Cancel {
			continue
		}
		name := t.Name
		cancelled := false
		fire := func() {
			if cancelled {
				return
			}
			cancelled = true
			delete(d.timers, name)
			d.Ticks = append(d.Ticks, name)
			at := d.Clock.Now()
			d.Core.Tick(at, name)
			d.apply(at, d.Core.Drain())
		}
		if t.At.After(now) {
			stopClock := d.Clock.AfterFunc(t.At.Sub(now), fire)
			d.timers[name] = func() bool { cancelled = true; return stopClock() }
			continue
		}
		// Due already: a shell would post the tick behind the current
		// message; here it fires right after this batch.
		d.timers[name] = func() bool { was := !cancelled; cancelled = true; return was }
		due = append(due, fire)
	}
	d.Sends = append(d.Sends, eff.Sends...)
	for _, f := range due {
		f()
	}
}
