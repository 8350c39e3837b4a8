package sim

import (
	"crypto/sha256"
	"fmt"
	"hash"
	"slices"
	"time"
)

// eventLog is a simulated run's event log. Every line is hashed (the same
// seed gives the same hash) and kept in full (a violation's related events
// are searched in it); lines that are not routine — heartbeats that report
// nothing new, engine steps — also go to a ring of the last keep lines,
// the trace a violation report shows.
type eventLog struct {
	logHash  hash.Hash
	full     []string
	ring     []string
	ringNext int
	keep     int
}

func newEventLog(keep int) eventLog { return eventLog{logHash: sha256.New(), keep: keep} }

// add logs one line at virtual time at.
func (l *eventLog) add(at time.Duration, routine bool, format string, args ...any) {
	line := fmt.Sprintf("%10.3fs %s", at.Seconds(), fmt.Sprintf(format, args...))
	l.logHash.Write([]byte(line))
	l.logHash.Write([]byte{'\n'})
	l.full = append(l.full, line)
	if routine || l.keep <= 0 {
		return
	}
	if len(l.ring) < l.keep {
		l.ring = append(l.ring, line)
	} else {
		l.ring[l.ringNext] = line
		l.ringNext = (l.ringNext + 1) % l.keep
	}
}

// trace is the ring, oldest line first.
func (l *eventLog) trace() []string {
	if len(l.ring) < l.keep {
		return slices.Clone(l.ring)
	}
	return append(slices.Clone(l.ring[l.ringNext:]), l.ring[:l.ringNext]...)
}
