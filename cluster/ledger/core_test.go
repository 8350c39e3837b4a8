package ledger

import (
	"errors"
	"testing"

	"github.com/asyncrl/asyncrl/messages"
)

func TestNextProgress(t *testing.T) {
	prev := Progress{Step: 5, Version: 5, Token: 3}
	cases := []struct {
		next Progress
		ok   bool
	}{
		{Progress{Step: 5, Version: 5, Token: 3}, true},
		{Progress{Step: 6, Version: 6, Token: 3}, true},
		{Progress{Step: 6, Version: 5, Token: 3}, true},
		{Progress{Step: 4, Version: 5, Token: 3}, false},
		{Progress{Step: 6, Version: 4, Token: 3}, false},
	}
	for _, tc := range cases {
		err := NextProgress(prev, tc.next)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrStepRegression)) {
			t.Errorf("NextProgress(%+v, %+v) = %v, want ok=%v", prev, tc.next, err, tc.ok)
		}
	}
}

func TestInFlightOf(t *testing.T) {
	e := func(id, node string, s messages.LedgerState) Entry {
		return Entry{Header: messages.Header{Sender: node}, PromptID: id, State: s}
	}
	all := []Entry{e("c", "n1", messages.LedgerConsumed), e("a", "n1", messages.LedgerConsumed), e("b", "n1", messages.LedgerTrained), e("d", "n2", messages.LedgerConsumed), e("f", "n1", messages.LedgerRequeued)}
	got := InFlightOf(all, "n1")
	if len(got) != 2 || got[0].PromptID != "a" || got[1].PromptID != "c" {
		t.Fatalf("InFlightOf = %v, want a and c", got)
	}
}
