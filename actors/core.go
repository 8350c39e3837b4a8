package actors

import "github.com/asyncrl/asyncrl/actors/effect"

// The core contract lives in package effect so that cores depend on it
// without depending on this shell; these aliases keep the shell's API.

// Core is effect.Core: Step(now, msg), Tick(now, timer), Drain().
type Core[In, Out any] = effect.Core[In, Out]

// Effects is effect.Effects, the outbox a core embeds.
type Effects[Out any] = effect.Effects[Out]

// Send is effect.Send.
type Send[Out any] = effect.Send[Out]

// Timer is effect.Timer.
type Timer = effect.Timer

// Metric is effect.Metric.
type Metric = effect.Metric

// MetricKind is effect.MetricKind.
type MetricKind = effect.MetricKind

// LogLevel is effect.LogLevel.
type LogLevel = effect.LogLevel

// Field is effect.Field.
type Field = effect.Field

// Log is effect.Log.
type Log = effect.Log

// Starter is effect.Starter.
type Starter = effect.Starter

// Metric kinds.
const (
	CounterAdd = effect.CounterAdd
	GaugeSet   = effect.GaugeSet
	GaugeAdd   = effect.GaugeAdd
	Observe    = effect.Observe
)

// Log levels.
const (
	LevelDebug = effect.LevelDebug
	LevelInfo  = effect.LevelInfo
	LevelWarn  = effect.LevelWarn
	LevelError = effect.LevelError
)
