package logx

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/term"
)

// Sentinel errors.
var (
	// ErrLevel: a log level name that is not debug, info, warn or error.
	ErrLevel = errors.New("logx: unknown log level")
	// ErrFormat: a log format name that is not auto, json or console.
	ErrFormat = errors.New("logx: unknown log format")
)

// Format is a log output format.
type Format string

// Log formats.
const (
	FormatAuto    Format = "auto"    // console on a terminal, JSON otherwise
	FormatJSON    Format = "json"    // one JSON object per line
	FormatConsole Format = "console" // human-readable, coloured on a terminal
)

// TimeFormat is the layout of the "time" field: UTC with milliseconds, so
// records from different actors order correctly at sub-second scale.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

var levels = map[string]zerolog.Level{
	"debug": zerolog.DebugLevel,
	"info":  zerolog.InfoLevel,
	"warn":  zerolog.WarnLevel,
	"error": zerolog.ErrorLevel,
}

// ParseLevel maps debug, info, warn or error (any case) to a zerolog level.
func ParseLevel(s string) (zerolog.Level, error) {
	if l, ok := levels[strings.ToLower(strings.TrimSpace(s))]; ok {
		return l, nil
	}
	return zerolog.NoLevel, fmt.Errorf("%w %q (want debug, info, warn or error)", ErrLevel, s)
}

// ParseFormat accepts auto, json or console (any case).
func ParseFormat(s string) (Format, error) {
	switch f := Format(strings.ToLower(strings.TrimSpace(s))); f {
	case FormatAuto, FormatJSON, FormatConsole:
		return f, nil
	}
	return "", fmt.Errorf("%w %q (want auto, json or console)", ErrFormat, s)
}

// Options configures New. The zero value logs info and above to stderr in
// the auto format.
type Options struct {
	// Level is debug, info, warn or error; "" means info.
	Level string
	// Format is auto, json or console; "" means auto.
	Format string
	// Out receives the records; nil means os.Stderr (stdout stays free for
	// command output such as `config print-defaults`).
	Out io.Writer
	// Now stamps records; nil means time.Now. Tests pin it.
	Now func() time.Time
	// NoColor turns off colours in the console format.
	NoColor bool
}

// New builds the process logger described by o.
func New(o Options) (zerolog.Logger, error) {
	level := zerolog.InfoLevel
	if o.Level != "" {
		l, err := ParseLevel(o.Level)
		if err != nil {
			return zerolog.Nop(), err
		}
		level = l
	}
	format := FormatAuto
	if o.Format != "" {
		f, err := ParseFormat(o.Format)
		if err != nil {
			return zerolog.Nop(), err
		}
		format = f
	}
	out := o.Out
	if out == nil {
		out = os.Stderr
	}
	if format == FormatAuto {
		format = FormatJSON
		if IsTerminal(out) {
			format = FormatConsole
		}
	}
	if format == FormatConsole {
		out = zerolog.ConsoleWriter{Out: out, NoColor: o.NoColor || !IsTerminal(out), TimeFormat: "15:04:05.000"}
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	// A hook rather than zerolog's Timestamp(): that one formats with the
	// global zerolog.TimeFieldFormat (seconds) and the global clock.
	return zerolog.New(out).Level(level).Hook(timestampHook{now}), nil
}

type timestampHook struct{ now func() time.Time }

func (h timestampHook) Run(e *zerolog.Event, _ zerolog.Level, _ string) {
	e.Str(zerolog.TimestampFieldName, h.now().UTC().Format(TimeFormat))
}

// IsTerminal reports whether w is a terminal (an *os.File on a tty).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// For returns a child logger whose records carry component (e.g. "router",
// "trainer").
func For(l zerolog.Logger, component string) zerolog.Logger {
	return l.With().Str("component", component).Logger()
}

// ForActor returns a child logger for one actor of a component (e.g.
// component "rollout", actor "rollout-3").
func ForActor(l zerolog.Logger, component, actor string) zerolog.Logger {
	return l.With().Str("component", component).Str("actor", actor).Logger()
}

// Limit returns a logger that lets through at most burst records per period
// and drops the rest, for warnings that can repeat in a hot loop (a replica
// refusing every request). Give each repeating warning its own limited
// logger so one noisy warning cannot hide another.
func Limit(l zerolog.Logger, burst uint32, period time.Duration) zerolog.Logger {
	return l.Sample(&zerolog.BurstSampler{Burst: burst, Period: period})
}
