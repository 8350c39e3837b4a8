package sim

import (
	"crypto/sha256"
	"fmt"
	"hash"
	"strconv"
	"time"

	"github.com/asyncrl/asyncrl/messages"
)

// eventLog is a simulated run's event log. Every line is hashed (the same
// seed gives the same hash) and kept in full (a violation's related events
// are searched in it); lines that are not routine — heartbeats that report
// nothing new, engine steps — also go to a ring of the last keep lines,
// the trace a violation report shows.
//
// A 10-step seed logs thousands of lines and most runs never read one, so
// the lines are kept as bytes in large shared chunks (one allocation per
// chunk, not several per line) and become strings only when read: the
// trace and the related events of a violation, Result.Log.
type eventLog struct {
	logHash hash.Hash
	// scratch is where a line is formatted ("%10.3fs " + text + "\n").
	scratch []byte
	// chunk is the tail of the current chunk; lines[i] aliases a chunk and
	// never moves (a full chunk is left as is and a new one started).
	chunk []byte
	lines [][]byte
	// ring holds the indices into lines of the last keep non-routine lines.
	ring     []int
	ringNext int
	keep     int
}

// logChunk is the size of one chunk of log text: a 10-step seed writes a
// few hundred KiB.
const logChunk = 64 << 10

func newEventLog(keep int) eventLog { return eventLog{logHash: sha256.New(), keep: keep} }

// add logs one line at virtual time at.
func (l *eventLog) add(at time.Duration, routine bool, format string, args ...any) {
	l.scratch = fmt.Appendf(appendClock(l.scratch[:0], at), format, args...)
	l.commit(routine)
}

// addStrings logs one line at virtual time at made of parts, without
// formatting.
func (l *eventLog) addStrings(at time.Duration, routine bool, parts ...string) {
	b := appendClock(l.scratch[:0], at)
	for _, p := range parts {
		b = append(b, p...)
	}
	l.scratch = b
	l.commit(routine)
}

// addDelivery logs a delivery: "<node> <- <the message, brief>".
func (l *eventLog) addDelivery(at time.Duration, routine bool, node string, m messages.Message) {
	b := append(append(appendClock(l.scratch[:0], at), node...), " <- "...)
	l.scratch = appendBrief(b, m)
	l.commit(routine)
}

// appendClock appends at as fmt's "%10.3fs " would write it (the log's
// format since its first version: the hash depends on it).
func appendClock(b []byte, at time.Duration) []byte {
	var num [32]byte
	s := strconv.AppendFloat(num[:0], at.Seconds(), 'f', 3, 64)
	for i := len(s); i < 10; i++ {
		b = append(b, ' ')
	}
	b = append(b, s...)
	return append(b, 's', ' ')
}

// commit hashes the line in scratch and keeps it.
func (l *eventLog) commit(routine bool) {
	l.scratch = append(l.scratch, '\n')
	l.logHash.Write(l.scratch)
	text := l.scratch[:len(l.scratch)-1]
	if len(text) > cap(l.chunk)-len(l.chunk) {
		l.chunk = make([]byte, 0, max(logChunk, len(text)))
	}
	start := len(l.chunk)
	l.chunk = append(l.chunk, text...)
	l.lines = append(l.lines, l.chunk[start:len(l.chunk):len(l.chunk)])
	if routine || l.keep <= 0 {
		return
	}
	i := len(l.lines) - 1
	if len(l.ring) < l.keep {
		l.ring = append(l.ring, i)
	} else {
		l.ring[l.ringNext] = i
		l.ringNext = (l.ringNext + 1) % l.keep
	}
}

// full is the whole log, oldest line first.
func (l *eventLog) full() []string {
	out := make([]string, len(l.lines))
	for i, b := range l.lines {
		out[i] = string(b)
	}
	return out
}

// trace is the ring, oldest line first.
func (l *eventLog) trace() []string {
	if len(l.ring) == 0 {
		return nil
	}
	out := make([]string, 0, len(l.ring))
	if len(l.ring) < l.keep {
		for _, i := range l.ring {
			out = append(out, string(l.lines[i]))
		}
		return out
	}
	for k := range l.ring {
		out = append(out, string(l.lines[l.ring[(l.ringNext+k)%l.keep]]))
	}
	return out
}
