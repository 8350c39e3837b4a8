// Package effect is the core contract every event-driven pure core in
// asyncrl is written against: the Core interface (Step(now, msg),
// Tick(now, timer), Drain), the Effects outbox a core embeds, and the
// effect values (sends, timers, metrics, logs) it hands out after each step.
// It imports only the standard library, so a core can depend on it without
// depending on the actor shell (package actors) that carries effects out;
// the shell and the simulator both read the same Effects. docs/cores.md
// describes the contract for every core.
package effect

import "time"

// Core is the pure decision-maker an actor shell drives. In is the type of
// message the core consumes; Out is the type of message it asks the shell to
// send (often an interface implemented by a closed set of concrete message
// structs).
//
// A Core must be deterministic: no goroutines, channels, locks, I/O, wall
// clock or global randomness. Time arrives as an argument and randomness, if
// any, is a *rand.Rand given to the core's constructor. The shell guarantees
// that Step, Tick and Drain are never called concurrently.
type Core[In, Out any] interface {
	// Step consumes one message at time now.
	Step(now time.Time, in In)
	// Tick reports that the timer called name (armed with Effects.SetTimer)
	// reached its deadline; now is the shell clock's time when it is handled.
	Tick(now time.Time, name string)
	// Drain returns the effects accumulated since the previous Drain and
	// forgets them. Cores usually embed Effects[Out], which provides it.
	Drain() Effects[Out]
}

// Starter is an optional Core method called once per incarnation, right
// after the factory built the core and before any message, so a fresh core
// can arm its first timers or announce itself.
type Starter interface {
	Start(now time.Time)
}

// Effects is what a core wants done after a Step or Tick. It doubles as the
// outbox cores embed: the helper methods append, Drain hands the batch over.
// The shell carries out one drained batch in this order: logs, metrics,
// timers, sends (each list in the order the core appended to it), so a
// message sent after a timer was armed can never see the timer missing.
type Effects[Out any] struct {
	Sends   []Send[Out]
	Timers  []Timer
	Metrics []Metric
	Logs    []Log
}

// Send asks the shell to deliver Msg on Subject through its Sender.
type Send[Out any] struct {
	// Subject is the bus subject (or the local route the Sender maps it to).
	Subject string
	// Msg is the concrete message.
	Msg Out
}

// Timer arms, re-arms or cancels the named timer. Arming a name that is
// already armed replaces its deadline; a timer fires at most once per arming.
type Timer struct {
	// Name identifies the timer inside one core; Tick receives it back.
	Name string
	// At is the deadline on the shell's clock; a deadline in the past fires
	// as soon as the shell gets to it.
	At time.Time
	// Cancel disarms the timer instead of arming it (At is ignored).
	Cancel bool
}

// MetricKind says how a Metric value is applied.
type MetricKind uint8

// Metric kinds.
const (
	// CounterAdd adds Value (>= 0) to a counter.
	CounterAdd MetricKind = iota + 1
	// GaugeSet sets a gauge to Value.
	GaugeSet
	// GaugeAdd adds Value (may be negative) to a gauge.
	GaugeAdd
	// Observe records Value in a histogram.
	Observe
)

// Metric is one metric update; the shell applies it through its MetricSink.
type Metric struct {
	// Name of a metric declared to the sink (e.g. "asyncrl_filter_dropped_total").
	Name string
	Kind MetricKind
	// LabelValues, in the order the metric declared its labels.
	LabelValues []string
	Value       float64
}

// LogLevel is the severity of a Log effect. Cores do not import a logger;
// the shell maps these onto zerolog levels.
type LogLevel uint8

// Log levels.
const (
	LevelDebug LogLevel = iota + 1
	LevelInfo
	LevelWarn
	LevelError
)

// Field is one key/value pair of a Log effect.
type Field struct {
	Key, Value string
}

// Log is a line the shell writes on the core's behalf, with the actor's
// name, role and run id attached.
type Log struct {
	Level LogLevel
	Msg   string
	// RateKey, when set, rate-limits the line: at most one per key per the
	// shell's LogInterval, then a count of the suppressed ones.
	RateKey string
	Fields  []Field
}

// Send appends a send effect.
func (e *Effects[Out]) Send(subject string, msg Out) {
	e.Sends = append(e.Sends, Send[Out]{Subject: subject, Msg: msg})
}

// SetTimer arms (or re-arms) the named timer for at.
func (e *Effects[Out]) SetTimer(name string, at time.Time) {
	e.Timers = append(e.Timers, Timer{Name: name, At: at})
}

// CancelTimer disarms the named timer; a no-op if it is not armed.
func (e *Effects[Out]) CancelTimer(name string) {
	e.Timers = append(e.Timers, Timer{Name: name, Cancel: true})
}

// Count adds v to the counter name.
func (e *Effects[Out]) Count(name string, v float64, labelValues ...string) {
	e.Metrics = append(e.Metrics, Metric{Name: name, Kind: CounterAdd, Value: v, LabelValues: labelValues})
}

// Gauge sets the gauge name to v.
func (e *Effects[Out]) Gauge(name string, v float64, labelValues ...string) {
	e.Metrics = append(e.Metrics, Metric{Name: name, Kind: GaugeSet, Value: v, LabelValues: labelValues})
}

// Observe records v in the histogram name.
func (e *Effects[Out]) Observe(name string, v float64, labelValues ...string) {
	e.Metrics = append(e.Metrics, Metric{Name: name, Kind: Observe, Value: v, LabelValues: labelValues})
}

// Log appends a log line. key rate-limits it when non-empty.
func (e *Effects[Out]) Log(level LogLevel, key, msg string, fields ...Field) {
	e.Logs = append(e.Logs, Log{Level: level, Msg: msg, RateKey: key, Fields: fields})
}

// Drain returns the accumulated effects and resets the outbox. The returned
// slices are owned by the caller.
func (e *Effects[Out]) Drain() Effects[Out] {
	out := *e
	*e = Effects[Out]{}
	return out
}

// Empty reports whether there is nothing to do.
func (e *Effects[Out]) Empty() bool {
	return len(e.Sends) == 0 && len(e.Timers) == 0 && len(e.Metrics) == 0 && len(e.Logs) == 0
}
