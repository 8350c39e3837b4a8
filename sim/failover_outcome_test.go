package sim

import (
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/actors/rollout/outcome"
)

// A failover rollout's store fails while the buffer has no leader and is
// tried again on the outcome core's schedule; once DefaultStoreFor has
// passed since it began it gives up: the group is aborted, unstored, and
// its node no longer holds it. (The scenario never gets that far — the
// term's watch steps down at 30 s — so the schedule is checked here.)
func TestFailoverStoreGivesUpAtStoreFor(t *testing.T) {
	w := newFailover(Config{Seed: 1, Scenario: ScenarioFailover, Steps: 2}.withDefaults())
	r := w.rollouts[0]
	g := &pgroup{id: "t1/p0#1", prompt: "p0", rollout: r, token: 1, state: "running",
		pipe: &pipe{node: w.trainers[0], stopped: true}}
	r.running = append(r.running, g)
	r.runEpisodes(g, time.Second)
	w.outage = 1
	for i := range g.eps {
		r.episodeEnded(g, i, "", r.inc)
	}
	if st := g.fate.Stage(); st != outcome.Storing || g.storeFails != 1 {
		t.Fatalf("after its episodes, with no buffer leader: stage %s, %d failed tries; want storing, 1", st, g.storeFails)
	}
	w.clock = g.storeBegan + outcome.DefaultStoreFor
	r.store(g, r.inc)
	if st := g.fate.Stage(); st != outcome.Storing || w.ro.StoresGivenUp != 0 {
		t.Fatalf("a try failing at StoreFor itself: stage %s, %d given up; want storing, 0 (tried again)", st, w.ro.StoresGivenUp)
	}
	w.clock += outcome.StoreRetryWait(outcome.DefaultStoreRetry)
	r.store(g, r.inc)
	if st := g.fate.Stage(); st != outcome.Aborted || !g.fate.Unstored() || w.ro.StoresGivenUp != 1 || len(r.running) != 0 {
		t.Fatalf("a try failing after StoreFor: stage %s, unstored %v, %d given up, node holds %d; want aborted, unstored, 1, 0",
			st, g.fate.Unstored(), w.ro.StoresGivenUp, len(r.running))
	}
}
