package bridge

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestGroupError: which failure a group call reports and whether the
// group is intact (every rank refused: nothing applied anywhere).
func TestGroupError(t *testing.T) {
	refusal := &ChildError{Code: CodeBadField, Field: "arrays.tokens", Message: "bad"}
	exited := fmt.Errorf("%w (python3): signal: killed", ErrChildExited)
	ok := rankResult{}
	for _, tc := range []struct {
		name    string
		res     []rankResult
		refused bool
		want    string // "" = no error
	}{
		{"all answered", []rankResult{ok, ok}, false, ""},
		{"one child, refused", []rankResult{{err: refusal}}, true, "trainer child: bad_field: arrays.tokens: bad"},
		{"every rank refused", []rankResult{{err: refusal}, {err: refusal}}, true, "rank 0 of 2: trainer child: bad_field"},
		// rank 1 died; rank 0's wait was cancelled by callAll: the death is the reason
		{"a rank died", []rankResult{{err: context.Canceled}, {err: exited}}, false, "rank 1 of 2: bridge: trainer child exited"},
		// one rank refused while the other had answered: the group diverged
		{"some refused", []rankResult{ok, {err: refusal}}, false, "rank 1 of 2: trainer child: bad_field"},
		{"refused and died", []rankResult{{err: exited}, {err: refusal}}, false, "rank 1 of 2: trainer child: bad_field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			refused, err := groupError(context.Background(), tc.res)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("err %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || refused != tc.refused {
				t.Fatalf("refused %v err %v; want refused %v and an error saying %q", refused, err, tc.refused, tc.want)
			}
		})
	}
	// the caller's own cancellation is reported as such
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := groupError(ctx, []rankResult{{err: context.Canceled}, {err: context.Canceled}}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled call: %v", err)
	}
}

// TestGroupOfChildWithoutGroupSupport: a child that does not know
// Init.group (the Go child) refuses it, so a group of it fails at start
// with the child's words instead of training the whole batch on every
// rank; the refusal is not retried.
func TestGroupOfChildWithoutGroupSupport(t *testing.T) {
	h := newHarness(t)
	h.opts.Ranks = 2
	s, err := Start(context.Background(), h.opts)
	if err == nil {
		_ = s.Close(context.Background())
		t.Fatal("a group of the Go child started")
	}
	var ce *ChildError
	if !errors.As(err, &ce) || ce.Field != "group" || !strings.Contains(err.Error(), "rank ") {
		t.Fatalf("err %v; want the child's bad_field group naming the rank", err)
	}
	if errors.Is(err, ErrRestartsExhausted) {
		t.Errorf("the refusal was retried: %v", err)
	}
}

// TestUnanswered: a failed group Init names the ranks whose answer never
// came (cancelled by the first failure), not when the caller cancelled.
func TestUnanswered(t *testing.T) {
	timedOut := &ChildError{Code: CodeBadField, Field: "group", Message: "rendezvous failed"}
	res := []rankResult{{err: timedOut}, {err: context.Canceled}, {}, {err: context.Canceled}}
	if got := unanswered(context.Background(), res); !strings.Contains(got, "rank 1, 3 of 4 had not answered its Init") {
		t.Errorf("unanswered = %q", got)
	}
	if got := unanswered(context.Background(), res[:1]); got != "" {
		t.Errorf("one child: %q", got)
	}
	if got := unanswered(context.Background(), []rankResult{{err: timedOut}, {err: timedOut}}); got != "" {
		t.Errorf("every rank answered: %q", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got := unanswered(ctx, res); got != "" {
		t.Errorf("the caller's cancellation: %q", got)
	}
}
