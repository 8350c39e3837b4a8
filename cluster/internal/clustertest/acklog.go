package clustertest

import (
	"sync"

	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
)

// AckLog collects the versions engines acked on a term's subjects: On is
// a bus handler for the term's ack subject.
type AckLog struct {
	mu   sync.Mutex
	acks []messages.EngineVersionAck
}

// On records the ack m carries (anything else is ignored).
func (l *AckLog) On(m *transport.Msg) {
	a, err := messages.DecodeAs[messages.EngineVersionAck](m.Data)
	if err != nil {
		return
	}
	l.mu.Lock()
	l.acks = append(l.acks, a)
	l.mu.Unlock()
}

// Acked reports whether engine acked version on term.
func (l *AckLog) Acked(term, engine string, version int64) bool {
	return l.Count(term, engine, version) > 0
}

// Count is how many times engine acked version on term.
func (l *AckLog) Count(term, engine string, version int64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, a := range l.acks {
		if a.RunID == term && a.Engine == engine && a.Version == version {
			n++
		}
	}
	return n
}
