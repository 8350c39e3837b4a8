package node

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/asyncrl/asyncrl/actors/trainer"
)

// The pipeline's face: what `asyncrl run` (Run: New, Start, Wait, Stop,
// Summary) and the cluster agent's terms (cluster/agent: New, Start,
// Steps, Err, Register, Stop, and Options.Remote's TermEngines) use of a
// Node. Nothing outside the package reads its fields.

// Steps returns the kept trained steps after the first i (the
// in-process trainer's records, or the StepDone messages a remote trainer
// published; the newest trainer.RecordsKept) and the next i. Every step
// is in the step log (n.steplog). Any goroutine may call it (the cluster
// agent's term loop polls it).
func (n *Node) Steps(i int) ([]trainer.StepRecord, int) {
	if n.tr != nil {
		return n.tr.StepsSince(i)
	}
	return n.ledger.stepRecords(i)
}

// stepCount is the number of trained steps.
func (n *Node) stepCount() int {
	if n.tr != nil {
		return n.tr.StepCount()
	}
	return n.ledger.stepCount()
}

// lastStep is the newest trained step, ok false before the first.
func (n *Node) lastStep() (trainer.StepRecord, bool) {
	c := n.stepCount()
	if c == 0 {
		return trainer.StepRecord{}, false
	}
	s, _ := n.Steps(c - 1)
	if len(s) == 0 {
		return trainer.StepRecord{}, false
	}
	return s[len(s)-1], true
}

// Err is the in-process trainer's failure (trainer.Actor.Err): nil while
// it trains, before Start and with a remote trainer. Any goroutine may
// call it (the cluster agent's term loop polls it).
func (n *Node) Err() error {
	if n.tr == nil {
		return nil
	}
	return n.tr.Err()
}

// Register adds collectors to the run's metrics registry (served on
// metrics.listen), after Start: the cluster agent's term metrics.
func (n *Node) Register(cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := n.reg.Register(c); err != nil {
			return fmt.Errorf("node: metrics: %w", err)
		}
	}
	return nil
}
