package agent

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/cluster/term"
)

// The e2e tests read each asyncrl node's --events-json file: the term
// core's decisions as typed records (lease acquired, resumed, step
// durable, requeued, run complete, step-downs), the agent's other lines
// (bus, gossip, member left, routing, ledger) as "text" records.

// records is the process's event stream so far (none when it wrote no
// --events-json file).
func (p *proc) records(t *testing.T) []EventRecord {
	t.Helper()
	if p.evPath == "" {
		return nil
	}
	return readEventsFile(t, p.evPath)
}

// ofKind keeps the records of kind k.
func ofKind(rs []EventRecord, k term.Kind) []EventRecord {
	var out []EventRecord
	for _, r := range rs {
		if r.Kind == k.String() {
			out = append(out, r)
		}
	}
	return out
}

// countKind is how many records of kind k rs holds.
func countKind(rs []EventRecord, k term.Kind) int { return len(ofKind(rs, k)) }

// lastDurable is the last durable step of rs (0: none).
func lastDurable(rs []EventRecord) int {
	s := ofKind(rs, term.StepDurable)
	if len(s) == 0 {
		return 0
	}
	return int(s[len(s)-1].Step)
}

// requeued is how many prompts and groups the core requeued in rs.
func requeued(rs []EventRecord) int {
	n := 0
	for _, r := range append(ofKind(rs, term.PromptsRequeued), ofKind(rs, term.GroupsRequeued)...) {
		n += r.Count
	}
	return n
}

// lossLines are the records of rs about a loss (leases, leader moves,
// step-downs, failures, requeues, members leaving), one line each.
func lossLines(rs []EventRecord) string {
	var keep []string
	for _, r := range rs {
		switch r.Kind {
		case TextKind:
			if !strings.HasPrefix(r.Line, "member left") {
				continue
			}
		case term.StepDurable.String(), term.Resumed.String(), term.RunComplete.String():
			continue
		}
		keep = append(keep, r.Kind+": "+r.Line)
	}
	return strings.Join(keep, "\n")
}

// recoveryTimeline lists rs (a node's records after a kill at killed) up
// to and including its first durable step, each timed from the kill.
func recoveryTimeline(rs []EventRecord, killed time.Time) string {
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprintf("+%6.2fs %s: %s", r.Time.Sub(killed).Seconds(), r.Kind, r.Line))
		if r.Kind == term.StepDurable.String() {
			break
		}
	}
	return strings.Join(out, "\n")
}
