package transition

import (
	"errors"
	"testing"

	"github.com/asyncrl/asyncrl/messages"
)

func ev(state messages.LedgerState, attempt int32, group string) messages.PromptLedger {
	return messages.PromptLedger{PromptID: "p1", GroupID: group, State: state, Attempt: attempt}
}

const (
	consumed = messages.LedgerConsumed
	trained  = messages.LedgerTrained
	filtered = messages.LedgerFiltered
	requeued = messages.LedgerRequeued
)

func TestApplyLegalTransitions(t *testing.T) {
	cases := []struct {
		name   string
		prev   *messages.PromptLedger
		ev     messages.PromptLedger
		want   messages.LedgerState
		outcom Outcome
	}{
		{"first consume", nil, ev(consumed, 0, "g0"), consumed, Applied},
		{"first consume at a later attempt", nil, ev(consumed, 3, "g3"), consumed, Applied},
		{"consumed→trained", ptr(ev(consumed, 0, "g0")), ev(trained, 0, "g0"), trained, Applied},
		{"consumed→filtered", ptr(ev(consumed, 0, "g0")), ev(filtered, 0, "g0"), filtered, Applied},
		{"consumed→requeued", ptr(ev(consumed, 0, "g0")), ev(requeued, 0, "g0"), requeued, Applied},
		{"requeued→consumed new attempt", ptr(ev(requeued, 0, "g0")), ev(consumed, 1, "g1"), consumed, Applied},
		{"requeued→consumed skipping attempts", ptr(ev(requeued, 1, "g1")), ev(consumed, 5, "g5"), consumed, Applied},
		{"trained replayed", ptr(ev(trained, 0, "g0")), ev(trained, 0, "g0"), trained, Duplicate},
		{"consumed replayed", ptr(ev(consumed, 2, "g2")), ev(consumed, 2, "g2"), consumed, Duplicate},
		{"requeued replayed", ptr(ev(requeued, 2, "g2")), ev(requeued, 2, "g2"), requeued, Duplicate},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var prev messages.PromptLedger
			if tc.prev != nil {
				prev = *tc.prev
			}
			got, out, err := Apply(prev, tc.prev != nil, tc.ev)
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if got.State != tc.want || out != tc.outcom || got.Attempt != tc.ev.Attempt {
				t.Fatalf("got %s attempt %d (%s), want %s attempt %d (%s)", got.State, got.Attempt, out, tc.want, tc.ev.Attempt, tc.outcom)
			}
		})
	}
}

func ptr(m messages.PromptLedger) *messages.PromptLedger { return &m }

func TestApplyIllegalTransitions(t *testing.T) {
	cases := []struct {
		name string
		prev *messages.PromptLedger
		ev   messages.PromptLedger
		want error
	}{
		{"empty prompt id", nil, messages.PromptLedger{State: consumed}, ErrBadEvent},
		{"unknown state", nil, ev("lost", 0, "g0"), ErrBadEvent},
		{"unknown state on a known prompt", ptr(ev(consumed, 0, "g0")), ev("done", 0, "g0"), ErrBadEvent},
		{"trained before consumed", nil, ev(trained, 0, "g0"), ErrNotInFlight},
		{"filtered before consumed", nil, ev(filtered, 0, "g0"), ErrNotInFlight},
		{"requeued before consumed", nil, ev(requeued, 0, "g0"), ErrNotInFlight},
		{"consumed twice", ptr(ev(consumed, 0, "g0")), ev(consumed, 1, "g1"), ErrInFlight},
		{"consumed twice same attempt other group", ptr(ev(consumed, 0, "g0")), ev(consumed, 0, "gX"), ErrInFlight},
		{"trained for another attempt", ptr(ev(consumed, 1, "g1")), ev(trained, 0, "g0"), ErrStaleAttempt},
		{"filtered for another attempt", ptr(ev(consumed, 1, "g1")), ev(filtered, 2, "g2"), ErrStaleAttempt},
		{"requeued for another attempt", ptr(ev(consumed, 1, "g1")), ev(requeued, 0, "g0"), ErrStaleAttempt},
		{"trained twice (other group)", ptr(ev(trained, 0, "g0")), ev(trained, 0, "gX"), ErrAlreadyTrained},
		{"trained then trained new attempt", ptr(ev(trained, 0, "g0")), ev(trained, 1, "g1"), ErrAlreadyTrained},
		{"trained then consumed", ptr(ev(trained, 0, "g0")), ev(consumed, 1, "g1"), ErrAlreadyTrained},
		{"trained then requeued", ptr(ev(trained, 0, "g0")), ev(requeued, 0, "g0"), ErrAlreadyTrained},
		{"trained then filtered", ptr(ev(trained, 0, "g0")), ev(filtered, 0, "g0"), ErrAlreadyTrained},
		{"filtered then consumed", ptr(ev(filtered, 0, "g0")), ev(consumed, 1, "g1"), ErrFinal},
		{"filtered then trained", ptr(ev(filtered, 0, "g0")), ev(trained, 0, "g0"), ErrFinal},
		{"filtered then requeued", ptr(ev(filtered, 0, "g0")), ev(requeued, 0, "g0"), ErrFinal},
		{"requeued then trained", ptr(ev(requeued, 0, "g0")), ev(trained, 0, "g0"), ErrNotInFlight},
		{"requeued then filtered", ptr(ev(requeued, 0, "g0")), ev(filtered, 0, "g0"), ErrNotInFlight},
		{"requeued then requeued new attempt", ptr(ev(requeued, 0, "g0")), ev(requeued, 1, "g1"), ErrNotInFlight},
		{"requeued consumed under the same attempt", ptr(ev(requeued, 2, "g2")), ev(consumed, 2, "gY"), ErrStaleAttempt},
		{"requeued consumed under an older attempt", ptr(ev(requeued, 2, "g2")), ev(consumed, 1, "g1"), ErrStaleAttempt},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var prev messages.PromptLedger
			if tc.prev != nil {
				prev = *tc.prev
			}
			got, _, err := Apply(prev, tc.prev != nil, tc.ev)
			if !errors.Is(err, ErrIllegalTransition) || !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want ErrIllegalTransition and %v", err, tc.want)
			}
			if got != prev {
				t.Fatalf("illegal transition changed the entry: %v → %v", prev, got)
			}
		})
	}
}
