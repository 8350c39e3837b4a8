package ledger

import (
	"errors"
	"fmt"
	"sort"

	"github.com/asyncrl/asyncrl/cluster/ledger/transition"
	"github.com/asyncrl/asyncrl/messages"
)

// The transition rule lives in the pure package transition (the
// simulator applies it too); these are its names here.

// Sentinel errors (transition's): each illegal transition wraps
// ErrIllegalTransition and one of the more precise ones.
var (
	ErrIllegalTransition = transition.ErrIllegalTransition
	ErrAlreadyTrained    = transition.ErrAlreadyTrained
	ErrFinal             = transition.ErrFinal
	ErrInFlight          = transition.ErrInFlight
	ErrNotInFlight       = transition.ErrNotInFlight
	ErrStaleAttempt      = transition.ErrStaleAttempt
	ErrBadEvent          = transition.ErrBadEvent
	// ErrStepRegression: trainer progress would go backwards.
	ErrStepRegression = errors.New("ledger: progress goes backwards")
)

// Outcome says what Apply did with a legal event (transition.Outcome).
type Outcome = transition.Outcome

// The outcomes of a legal event.
const (
	Applied   = transition.Applied
	Duplicate = transition.Duplicate
)

// Entry is a prompt's durable record: its last legal transition.
type Entry = transition.Entry

// Apply is transition.Apply: it validates ev against the prompt's stored
// entry (exists false when the prompt was never recorded) and returns the
// entry to store. Pure.
func Apply(prev Entry, exists bool, ev messages.PromptLedger) (Entry, Outcome, error) {
	return transition.Apply(prev, exists, ev)
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
// caller (SaveProgress) checks the fence first with contender.CheckFence.
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
