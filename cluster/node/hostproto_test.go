package node

import (
	"sync"
	"testing"

	"github.com/asyncrl/asyncrl/cluster/enginehost"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
)

// ackLog collects the versions engines acked on a term's subjects.
type ackLog struct {
	mu   sync.Mutex
	acks []messages.EngineVersionAck
}

func (l *ackLog) on(m *transport.Msg) {
	a, err := messages.DecodeAs[messages.EngineVersionAck](m.Data)
	if err != nil {
		return
	}
	l.mu.Lock()
	l.acks = append(l.acks, a)
	l.mu.Unlock()
}

// acked reports whether engine acked version on term.
func (l *ackLog) acked(term, engine string, version int64) bool {
	return l.count(term, engine, version) > 0
}

// count is how many times engine acked version on term.
func (l *ackLog) count(term, engine string, version int64) int {
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

// The engine host reads the LoadWeights URI and the term's base with the
// scheme and prefix the holder's remote.go writes them with.
func TestEngineHostSharesTheHolderProtocol(t *testing.T) {
	if natsObjectScheme != enginehost.ObjectScheme || termBasePrefix != enginehost.BasePrefix {
		t.Fatalf("holder writes %q/%q, engine host reads %q/%q", natsObjectScheme, termBasePrefix, enginehost.ObjectScheme, enginehost.BasePrefix)
	}
}
