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
	if err := r.a.ledgerRetry(ctx, func() (err error) {
		rq, err = r.a.led.RequeueInFlight(ctx, r.a.cfg.Name, older)
		return err
	}); err != nil {
		r.failed(ctx, fmt.Errorf("node: requeue the prompts terms before token %d had in flight: %w", token, err))
		return
	}
	r.core.Step(time.Now(), term.StaleRequeued{Token: token, Count: len(rq)})
}

// ledgerProbeWait bounds one ask for the prompt ledger's leader
// (ledger.LeaderAnswers) before a try of ledgerRetry.
const ledgerProbeWait = time.Second

// ledgerRetry tries f for up to 30 s while a dead node's JetStream server's
// streams elect new leaders, each try only once the prompt ledger's
// leader answers (1 s an ask): a takeover's requeue sent while the
// ledger's stream elected a leader went unanswered for nats.go's 5 s, and
// the claim's requeue took 5.5–10 s in 13 of 30 holder kills (seeds
// 201–210, bench/results/cluster-takeover.md).
func (a *Agent) ledgerRetry(ctx context.Context, f func() error) error {
	return retry.Do(ctx, 30*time.Second, retry.After(func() error { return a.led.LeaderAnswers(ctx, ledgerProbeWait) }, f))
}
