package ledger

import (
	"errors"
	"fmt"
	"sort"

	"github.com/asyncrl/asyncrl/messages"
)

// Sentinel errors. Each illegal transition wraps ErrIllegalTransition and
// one of the more precise ones.
var (
	ErrIllegalTransition = errors.New("ledger: illegal transition")
	// ErrAlreadyTrained: the prompt was trained; nothing may follow.
	ErrAlreadyTrained = errors.New("ledger: prompt already trained")
	// ErrFinal: the prompt was filtered; nothing may follow.
	ErrFinal = errors.New("ledger: prompt is final (filtered)")
	// ErrInFlight: consumed again while its attempt is still in flight.
	ErrInFlight = errors.New("ledger: prompt already in flight")
	// ErrNotInFlight: settled (trained, filtered, requeued) without being consumed.
	ErrNotInFlight = errors.New("ledger: prompt not in flight")
	// ErrStaleAttempt: the event's attempt is not the one in flight, or a
	// requeued prompt is consumed again without a new, larger attempt id.
	ErrStaleAttempt = errors.New("ledger: stale attempt")
	// ErrBadEvent: the event is malformed (empty prompt id, unknown state).
	ErrBadEvent = errors.New("ledger: bad event")
	// ErrStepRegression: trainer progress would go backwards.
	ErrStepRegression = errors.New("ledger: progress goes backwards")
)

// Outcome says what Apply did with a legal event.
type Outcome int

const (
	// Applied: the event moved the prompt to a new state.
	Applied Outcome = iota
	// Duplicate: the event repeats the stored state exactly; nothing changes.
	Duplicate
)

func (o Outcome) String() string {
	if o == Duplicate {
		return "duplicate"
	}
	return "applied"
}

// Entry is a prompt's durable record: its last legal transition.
type Entry = messages.PromptLedger

// Apply validates ev against the prompt's stored entry (exists false when
// the prompt was never recorded) and returns the entry to store. It is
// pure: no I/O, no clock.
func Apply(prev Entry, exists bool, ev messages.PromptLedger) (Entry, Outcome, error) {
	if ev.PromptID == "" {
		return prev, Applied, fmt.Errorf("%w: %w: empty prompt id", ErrIllegalTransition, ErrBadEvent)
	}
	switch ev.State {
	case messages.LedgerConsumed, messages.LedgerTrained, messages.LedgerFiltered, messages.LedgerRequeued:
	default:
		return prev, Applied, fmt.Errorf("%w: %w: prompt %s: unknown state %q (known: consumed, trained, filtered, requeued)",
			ErrIllegalTransition, ErrBadEvent, ev.PromptID, ev.State)
	}
	if exists && prev.PromptID != ev.PromptID {
		panic(fmt.Sprintf("ledger: entry of prompt %q applied to prompt %q", prev.PromptID, ev.PromptID))
	}
	if exists && prev.State == ev.State && prev.Attempt == ev.Attempt && prev.GroupID == ev.GroupID {
		return prev, Duplicate, nil
	}
	bad := func(why error, format string, args ...any) (Entry, Outcome, error) {
		return prev, Applied, fmt.Errorf("%w: %w: prompt %s: %s", ErrIllegalTransition, why, ev.PromptID, fmt.Sprintf(format, args...))
	}
	if !exists {
		if ev.State != messages.LedgerConsumed {
			return bad(ErrNotInFlight, "%s before it was consumed", ev.State)
		}
		return ev, Applied, nil
	}
	switch prev.State {
	case messages.LedgerTrained:
		return bad(ErrAlreadyTrained, "%s after trained (attempt %d, step %d)", ev.State, prev.Attempt, prev.Step)
	case messages.LedgerFiltered:
		return bad(ErrFinal, "%s after filtered (attempt %d)", ev.State, prev.Attempt)
	case messages.LedgerConsumed:
		if ev.State == messages.LedgerConsumed {
			return bad(ErrInFlight, "consumed (attempt %d) while attempt %d is in flight", ev.Attempt, prev.Attempt)
		}
		if ev.Attempt != prev.Attempt {
			return bad(ErrStaleAttempt, "%s for attempt %d, attempt %d is in flight", ev.State, ev.Attempt, prev.Attempt)
		}
		return ev, Applied, nil
	case messages.LedgerRequeued:
		if ev.State != messages.LedgerConsumed {
			return bad(ErrNotInFlight, "%s after requeued (attempt %d); consume it again first", ev.State, prev.Attempt)
		}
		if ev.Attempt <= prev.Attempt {
			return bad(ErrStaleAttempt, "consumed again with attempt %d, want a new attempt > %d", ev.Attempt, prev.Attempt)
		}
		return ev, Applied, nil
	}
	panic(fmt.Sprintf("ledger: stored entry of prompt %s has unknown state %q", prev.PromptID, prev.State))
}

// Progress is the trainer's durable position.
type Progress struct {
	// Step is the last completed training step.
	Step int64 `json:"step"`
	// Version is the last published policy version.
	Version int64 `json:"version"`
	// Checkpoint is where the last checkpoint lives (path or URL); may be empty.
	Checkpoint string `json:"checkpoint,omitempty"`
	// Token is the fencing token of the holder that wrote it.
	Token uint64 `json:"token"`
	// Holder names that holder (for operators).
	Holder string `json:"holder,omitempty"`
	// Prompts are the prompt ids Step trained. They are written with the
	// step, so a holder that dies before it marks them trained leaves a
	// record the next holder completes (rather than requeue prompts whose
	// training the durable weights already hold).
	Prompts []PromptAttempt `json:"prompts,omitempty"`
}

// PromptAttempt names one attempt of a prompt.
type PromptAttempt struct {
	PromptID string `json:"prompt"`
	GroupID  string `json:"group,omitempty"`
	Attempt  int32  `json:"attempt"`
}

// NextProgress validates a progress write against the stored one: step
// and version must not go backwards. It does not look at the tokens: the
// caller (SaveProgress) checks the fence first with lease.CheckFence.
func NextProgress(prev Progress, next Progress) error {
	if next.Step < prev.Step || next.Version < prev.Version {
		return fmt.Errorf("%w: step %d→%d, version %d→%d", ErrStepRegression, prev.Step, next.Step, prev.Version, next.Version)
	}
	return nil
}

// InFlightOf returns the entries consumed by node (Header.Sender) and not
// yet settled, sorted by prompt id: what a dead node leaves behind.
func InFlightOf(entries []Entry, node string) []Entry {
	var out []Entry
	for _, e := range entries {
		if e.State == messages.LedgerConsumed && e.Sender == node {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PromptID < out[j].PromptID })
	return out
}
