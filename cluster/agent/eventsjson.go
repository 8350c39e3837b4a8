package agent

import (
	"encoding/json"
	"io"
	"time"

	"github.com/asyncrl/asyncrl/cluster/term"
	"github.com/asyncrl/asyncrl/cluster/termwatch"
)

// TextKind is the Kind of an EventRecord for an agent line that is no
// term-core event (bus, gossip, member joined/left, routing, ledger…).
const TextKind = "text"

// EventRecord is one line of the agent's JSON event stream
// (Config.EventsJSON, asyncrl node --events-json): a term-core event
// with its fields, or an untyped agent line (Kind "text"). Line is the
// text line the node prints for it (without the "node NAME: " prefix).
type EventRecord struct {
	// Kind is term.Kind's name ("lease-acquired", "resumed",
	// "step-durable", "prompts-requeued", …) or TextKind.
	Kind string `json:"kind"`
	// Agent is the node that wrote the record.
	Agent   string `json:"agent"`
	Token   uint64 `json:"token"`
	Step    int64  `json:"step"`
	Version int64  `json:"version"`
	Count   int    `json:"count"`
	// Node is the event's node (whose prompts were requeued, who trained
	// the run), not the writer.
	Node string `json:"node,omitempty"`
	Dep  string `json:"dep,omitempty"`
	// Reason: a resignation's or failure's (term.Reason); for a watch's
	// step-down, the watch's (termwatch.Reason).
	Reason string `json:"reason,omitempty"`
	// StepDown marks a watch event that steps the term down.
	StepDown bool `json:"step_down,omitempty"`
	// WaitS: a resignation's wait in seconds before the node contends
	// again (Count: its terms failed since its last durable step).
	WaitS float64   `json:"wait_s,omitempty"`
	Err   string    `json:"err,omitempty"`
	Time  time.Time `json:"time"`
	Line  string    `json:"line"`
}

// termRecord is e's record, written by agent at now.
func termRecord(agent string, now time.Time, e term.Event) EventRecord {
	r := EventRecord{Kind: e.Kind.String(), Agent: agent, Token: e.Token, Step: e.Step, Version: e.Version,
		Count: e.Count, Node: e.Node, Dep: e.Dep, Reason: string(e.Reason), Err: e.Err, WaitS: e.Wait.Seconds(), Time: now, Line: e.String()}
	if e.Kind == term.Watch {
		r.Dep, r.Err = e.Watch.Dep, e.Watch.Err
		if e.Watch.Kind == termwatch.StepDown {
			r.StepDown, r.Reason = true, string(e.Watch.Reason)
		}
	}
	return r
}

// writeRecord writes r as one JSON line in one Write (a killed node
// leaves whole lines).
func writeRecord(w io.Writer, r EventRecord) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
