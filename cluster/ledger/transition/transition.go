package transition

import (
	"errors"
	"fmt"

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
