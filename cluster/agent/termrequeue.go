package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/asyncrl/asyncrl/cluster/internal/retry"
	"github.com/asyncrl/asyncrl/cluster/ledger"
	"github.com/asyncrl/asyncrl/cluster/term"
)

// requeueStale applies RequeueStale: every prompt in flight in the
// durable ledger that a term older than token consumed goes back,
// whichever node held it — the progress names only the last claimer, and
// one that died before its requeue left its predecessors' prompts in
// flight. Ids PromptID did not qualify count as older. Retried while a
// dead node's JetStream server's streams elect new leaders.
func (r *termRun) requeueStale(ctx context.Context, token uint64) {
	older := func(e ledger.Entry) bool {
		tok, ok := term.PromptTokenOf(e.PromptID)
		return !ok || tok < token
	}
	// The marks of the durable step the claim completes (MarkTrained, in
	// the same Ready and written off this goroutine) first: the sweep
	// would take their prompts, still unmarked, for prompts in flight
	// (TestAgentStandbyTakesOver: trained 31 of 32, 1 run in 8).
	r.a.waitMarks(markWithin)
	var rq []ledger.Entry
	if err := retry.Do(ctx, 30*time.Second, func() (err error) {
		rq, err = r.a.led.RequeueInFlight(ctx, r.a.cfg.Name, older)
		return err
	}); err != nil {
		r.failed(ctx, fmt.Errorf("node: requeue the prompts terms before token %d had in flight: %w", token, err))
		return
	}
	r.core.Step(time.Now(), term.StaleRequeued{Token: token, Count: len(rq)})
}
