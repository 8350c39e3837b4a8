package ledger

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyncrl/asyncrl/messages"
)

// Refusal is a transition the prompt ledger refused (ErrIllegalTransition)
// that a writer asked for in earnest: a trained mark, a pipeline event. A
// refused transition leaves its prompt where it was — a trained mark
// refused leaves a trained prompt counted in flight or requeued — so a
// run's summary must count every one, whichever node was refused and
// whether it lived to the end (issue 37: "refused 0" hid a refused mark).
type Refusal struct {
	PromptID string               `json:"prompt"`
	GroupID  string               `json:"group,omitempty"`
	State    messages.LedgerState `json:"state"`
	Attempt  int32                `json:"attempt"`
	Step     int64                `json:"step,omitempty"`
	// Node is the writer that was refused; Err the ledger's reason.
	Node string    `json:"node"`
	Err  string    `json:"err"`
	At   time.Time `json:"at"`
}

const refusalPrefix = "refused."

// refusalKey is one key per refused transition (prompt, state, attempt):
// a writer that retries the same transition is counted once.
func refusalKey(r Refusal) string {
	return fmt.Sprintf("%s%s.%s.%d", refusalPrefix, base64.RawURLEncoding.EncodeToString([]byte(r.PromptID)), r.State, r.Attempt)
}

// RefusalOf is the Refusal of ev refused with err by node at now.
func RefusalOf(ev messages.PromptLedger, node string, err error, now time.Time) Refusal {
	return Refusal{PromptID: ev.PromptID, GroupID: ev.GroupID, State: ev.State, Attempt: ev.Attempt, Step: ev.Step,
		Node: node, Err: err.Error(), At: now}
}

// RecordRefusal keeps r in the progress bucket (replicated like the
// progress): Refusals lists it for the run's summary.
func (l *Ledger) RecordRefusal(ctx context.Context, r Refusal) error {
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("ledger: encode refusal: %w", err)
	}
	if _, err := l.progress.Put(ctx, refusalKey(r), data); err != nil {
		return fmt.Errorf("ledger: record the refusal of prompt %s %s: %w", r.PromptID, r.State, err)
	}
	return nil
}

// Refusals lists every refusal recorded in the run, sorted by prompt id.
func (l *Ledger) Refusals(ctx context.Context) ([]Refusal, error) {
	w, err := l.progress.Watch(ctx, refusalPrefix+">", jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("ledger: list refusals: %w", err)
	}
	defer func() { _ = w.Stop() }()
	var out []Refusal
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("ledger: list refusals: %w", ctx.Err())
		case ent, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("ledger: list refusals: watcher closed")
			}
			if ent == nil {
				sort.Slice(out, func(i, j int) bool {
					if out[i].PromptID != out[j].PromptID {
						return out[i].PromptID < out[j].PromptID
					}
					return out[i].State < out[j].State
				})
				return out, nil
			}
			var r Refusal
			if err := json.Unmarshal(ent.Value(), &r); err != nil {
				return nil, fmt.Errorf("ledger: decode refusal %s: %w", ent.Key(), err)
			}
			out = append(out, r)
		}
	}
}
