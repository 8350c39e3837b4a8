package messages

import (
	"sort"
	"strconv"
	"strings"
)

// maxListed bounds how many elements of a slice String() prints: token
// arrays can hold 100k+ entries and logs must stay readable. The total length
// is always printed, so truncation is visible.
const maxListed = 8

// line builds the deterministic String() form: Name{k=v k=v ...}. Fields are
// written in the order the caller writes them (the struct order), floats with
// strconv 'g' shortest form, strings quoted.
type line struct{ b strings.Builder }

func newLine(name string, h Header) *line {
	l := &line{}
	l.b.WriteString(name)
	l.b.WriteString("{run=")
	l.b.WriteString(strconv.Quote(h.RunID))
	l.b.WriteString(" sender=")
	l.b.WriteString(strconv.Quote(h.Sender))
	l.b.WriteString(" v=")
	l.b.WriteString(strconv.FormatInt(h.Version, 10))
	return l
}

func (l *line) key(k string) {
	l.b.WriteByte(' ')
	l.b.WriteString(k)
	l.b.WriteByte('=')
}

func (l *line) str(k, v string) *line {
	l.key(k)
	l.b.WriteString(strconv.Quote(v))
	return l
}

func (l *line) i64(k string, v int64) *line {
	l.key(k)
	l.b.WriteString(strconv.FormatInt(v, 10))
	return l
}

func (l *line) f64(k string, v float64) *line {
	l.key(k)
	l.b.WriteString(strconv.FormatFloat(v, 'g', -1, 64))
	return l
}

func (l *line) boolean(k string, v bool) *line {
	l.key(k)
	l.b.WriteString(strconv.FormatBool(v))
	return l
}

// list writes [a b c …+N] with at most maxListed elements.
func list[T any](l *line, k string, v []T, f func(T) string) *line {
	l.key(k)
	l.b.WriteByte('[')
	for i, x := range v {
		if i == maxListed {
			l.b.WriteString(" …+")
			l.b.WriteString(strconv.Itoa(len(v) - maxListed))
			break
		}
		if i > 0 {
			l.b.WriteByte(' ')
		}
		l.b.WriteString(f(x))
	}
	l.b.WriteByte(']')
	return l
}

func (l *line) strs(k string, v []string) *line { return list(l, k, v, strconv.Quote) }

func (l *line) i32s(k string, v []int32) *line {
	return list(l, k, v, func(x int32) string { return strconv.FormatInt(int64(x), 10) })
}

func (l *line) f32s(k string, v []float32) *line {
	return list(l, k, v, func(x float32) string { return strconv.FormatFloat(float64(x), 'g', -1, 32) })
}

func (l *line) f64s(k string, v []float64) *line {
	return list(l, k, v, func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) })
}

// f64map writes {a:1 b:2} with keys sorted, so map iteration order never leaks.
func (l *line) f64map(k string, m map[string]float64) *line {
	keys := make([]string, 0, len(m))
	for name := range m {
		keys = append(keys, name)
	}
	sort.Strings(keys)
	l.key(k)
	l.b.WriteByte('{')
	for i, name := range keys {
		if i > 0 {
			l.b.WriteByte(' ')
		}
		l.b.WriteString(strconv.Quote(name))
		l.b.WriteByte(':')
		l.b.WriteString(strconv.FormatFloat(m[name], 'g', -1, 64))
	}
	l.b.WriteByte('}')
	return l
}

func (l *line) done() string {
	l.b.WriteByte('}')
	return l.b.String()
}
