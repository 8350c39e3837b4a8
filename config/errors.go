package config

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Sentinel kinds of config errors; every *Error unwraps to one of them, so
// callers can tell a typo from a bad value with errors.Is.
var (
	// ErrUnknownKey: the file names a key that no config field has.
	ErrUnknownKey = errors.New("config: unknown key")
	// ErrType: a value of the wrong YAML type (a string where an int goes).
	ErrType = errors.New("config: wrong type")
	// ErrInvalid: a well-typed value that validation rejects.
	ErrInvalid = errors.New("config: invalid value")
	// ErrSyntax: the file is not valid YAML.
	ErrSyntax = errors.New("config: bad yaml")
)

// Error is one problem in a config, located by its dotted key path and, when
// it came from a file, by the file name and line. Its message has the form
//
//	FILE:LINE: PATH: MSG
//
// with "FILE:LINE: " shortened to "FILE: " when the line is unknown and
// omitted when the config did not come from a file.
type Error struct {
	File string // config file name; "" when validating an in-memory Config
	Line int    // 1-based line in File; 0 when unknown
	Path string // dotted key path, e.g. "trainer.max_staleness_steps"; "" for whole-file problems
	Msg  string // what is wrong, e.g. `must be ≥ 1, got 0`
	Kind error  // ErrUnknownKey, ErrType, ErrInvalid or ErrSyntax
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns the error's kind sentinel.
func (e *Error) Unwrap() error { return e.Kind }

// joinErrors returns nil, the single error, or all of them joined (one per
// line) so a user fixes every problem in one edit.
func joinErrors(errs []*Error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	all := make([]error, len(errs))
	for i, e := range errs {
		all[i] = e
	}
	return errors.Join(all...)
}

// checker collects validation errors for one config section.
type checker struct {
	section string
	errs    []*Error
}

func (c *checker) path(field string) string {
	if field == "" {
		return c.section
	}
	return c.section + "." + field
}

func (c *checker) fail(field, format string, args ...any) {
	c.errs = append(c.errs, &Error{Path: c.path(field), Msg: fmt.Sprintf(format, args...), Kind: ErrInvalid})
}

func (c *checker) err() error { return joinErrors(c.errs) }

// atLeast checks v ≥ min for an integer field.
func (c *checker) atLeast(field string, v, min int64) {
	if v < min {
		c.fail(field, "must be ≥ %d, got %d", min, v)
	}
}

// unboundedOrAtLeast checks that v is -1 (no limit) or ≥ min.
func (c *checker) unboundedOrAtLeast(field string, v, min int64) {
	if v != -1 && v < min {
		c.fail(field, "must be -1 (no limit) or ≥ %d, got %d", min, v)
	}
}

// positiveFloat checks v > 0.
func (c *checker) positiveFloat(field string, v float64) {
	if !(v > 0) {
		c.fail(field, "must be > 0, got %g", v)
	}
}

// nonNegativeFloat checks v ≥ 0.
func (c *checker) nonNegativeFloat(field string, v float64) {
	if !(v >= 0) {
		c.fail(field, "must be ≥ 0, got %g", v)
	}
}

// inRange checks lo ≤ v ≤ hi.
func (c *checker) inRange(field string, v, lo, hi float64) {
	if !(v >= lo && v <= hi) {
		c.fail(field, "must be in [%g, %g], got %g", lo, hi, v)
	}
}

// positiveDuration checks d > 0.
func (c *checker) positiveDuration(field string, d time.Duration) {
	if d <= 0 {
		c.fail(field, "must be a positive duration, got %s", formatDuration(d))
	}
}

// notEmpty checks that a required string is set.
func (c *checker) notEmpty(field, v string) {
	if v == "" {
		c.fail(field, "must not be empty")
	}
}
