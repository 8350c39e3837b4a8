package messages

import (
	"sort"
	"strconv"
	"sync"
)

// maxListed bounds how many elements of a slice String() prints: token
// arrays can hold 100k+ entries and logs must stay readable. The total length
// is always printed, so truncation is visible.
const maxListed = 8

// line builds the deterministic String() form: Name{k=v k=v ...}. Fields are
// written in the order the caller writes them (the struct order), floats with
// strconv 'g' shortest form, strings quoted. It appends to a pooled byte
// slice and converts once in done, so a String() allocates only its result:
// it runs for every message a shell or the simulator logs. A line must end
// with done and not be used after it.
type line struct{ b []byte }

var lines = sync.Pool{New: func() any { return &line{b: make([]byte, 0, 256)} }}

// maxPooledLine: a line that grew past this (a long list) is not kept.
const maxPooledLine = 4 << 10

func newLine(name string, h Header) *line {
	l := lines.Get().(*line)
	l.b = append(l.b[:0], name...)
	l.b = append(l.b, "{run="...)
	l.b = strconv.AppendQuote(l.b, h.RunID)
	l.b = append(l.b, " sender="...)
	l.b = strconv.AppendQuote(l.b, h.Sender)
	l.b = append(l.b, " v="...)
	l.b = strconv.AppendInt(l.b, h.Version, 10)
	return l
}

func (l *line) key(k string) {
	l.b = append(l.b, ' ')
	l.b = append(l.b, k...)
	l.b = append(l.b, '=')
}

func (l *line) str(k, v string) *line {
	l.key(k)
	l.b = strconv.AppendQuote(l.b, v)
	return l
}

func (l *line) i64(k string, v int64) *line {
	l.key(k)
	l.b = strconv.AppendInt(l.b, v, 10)
	return l
}

func (l *line) f64(k string, v float64) *line {
	l.key(k)
	l.b = strconv.AppendFloat(l.b, v, 'g', -1, 64)
	return l
}

func (l *line) boolean(k string, v bool) *line {
	l.key(k)
	l.b = strconv.AppendBool(l.b, v)
	return l
}

// list writes [a b c …+N] with at most maxListed elements.
func list[T any](l *line, k string, v []T, f func([]byte, T) []byte) *line {
	l.key(k)
	l.b = append(l.b, '[')
	for i, x := range v {
		if i == maxListed {
			l.b = append(l.b, " …+"...)
			l.b = strconv.AppendInt(l.b, int64(len(v)-maxListed), 10)
			break
		}
		if i > 0 {
			l.b = append(l.b, ' ')
		}
		l.b = f(l.b, x)
	}
	l.b = append(l.b, ']')
	return l
}

func (l *line) strs(k string, v []string) *line { return list(l, k, v, strconv.AppendQuote) }

func (l *line) i32s(k string, v []int32) *line {
	return list(l, k, v, func(b []byte, x int32) []byte { return strconv.AppendInt(b, int64(x), 10) })
}

func (l *line) f32s(k string, v []float32) *line {
	return list(l, k, v, func(b []byte, x float32) []byte { return strconv.AppendFloat(b, float64(x), 'g', -1, 32) })
}

func (l *line) f64s(k string, v []float64) *line {
	return list(l, k, v, func(b []byte, x float64) []byte { return strconv.AppendFloat(b, x, 'g', -1, 64) })
}

// f64map writes {a:1 b:2} with keys sorted, so map iteration order never leaks.
func (l *line) f64map(k string, m map[string]float64) *line {
	keys := make([]string, 0, len(m))
	for name := range m {
		keys = append(keys, name)
	}
	sort.Strings(keys)
	l.key(k)
	l.b = append(l.b, '{')
	for i, name := range keys {
		if i > 0 {
			l.b = append(l.b, ' ')
		}
		l.b = strconv.AppendQuote(l.b, name)
		l.b = append(l.b, ':')
		l.b = strconv.AppendFloat(l.b, m[name], 'g', -1, 64)
	}
	l.b = append(l.b, '}')
	return l
}

func (l *line) done() string {
	l.b = append(l.b, '}')
	s := string(l.b)
	if cap(l.b) <= maxPooledLine {
		lines.Put(l)
	}
	return s
}
