package agent

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/cluster/internal/clustertest"
	"github.com/asyncrl/asyncrl/cluster/placement"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/internal/syncbuf"
)

// A rollout-only node serves the holder's term; when it crashes (its bus
// and gossip cut without a word) the holder requeues the groups it had in
// flight as soon as membership declares it dead — the prompts come back
// with a new attempt instead of waiting for the end of the run — and the
// run finishes with every prompt trained once, none in flight.
func TestRolloutNodeCrashRequeuesItsGroups(t *testing.T) {
	url := externalBus(t)
	ctx := context.Background()
	// Long enough that the run is still going when membership declares n2
	// dead (≈ 3 s after the crash).
	const steps = 40
	var ev1, ev2 syncbuf.Buffer
	a1 := testAgent(t, url, Config{Name: "n1", Roles: []string{placement.Trainer, placement.Engine}, Run: agentRunConfig(t, steps), Events: &ev1})
	defer a1.Stop()
	a2 := testAgent(t, url, Config{Name: "n2", Roles: []string{placement.Rollout}, Join: []string{a1.ms.Addr()}, Run: agentRunConfig(t, steps), Events: &ev2})
	defer a2.Stop()
	clustertest.WaitFor(t, 30*time.Second, "n2's rollouts to follow n1's term", func() bool { return strings.Contains(ev2.String(), "rollouts follow term") })
	tok := regexp.MustCompile(`lease trainer acquired token (\d+)`).FindStringSubmatch(ev1.String())
	if tok == nil {
		t.Fatalf("n1 holds no lease:\n%s", ev1.String())
	}
	inFlight := func() (prompts []string) {
		for _, a := range a2.rollouts.Actors() {
			_, p := a.InFlight()
			prompts = append(prompts, p...)
		}
		return prompts
	}
	clustertest.WaitFor(t, 30*time.Second, "n2 to run groups", func() bool { return len(inFlight()) >= 2 && lastStep(ev1.String()) >= 1 })
	// Crash n2: nothing it still runs can be published from here on.
	// (A group that finishes between these two lines is published and
	// judged as usual; the others come back with a new attempt.)
	lost := inFlight()
	_ = a2.bus.Close()
	before := map[string]int32{}
	for _, p := range lost {
		// n1's mirror writes the durable entry a moment after the
		// controller admitted the prompt (slower under -race).
		id := fmt.Sprintf("t%s/%s", tok[1], p)
		clustertest.WaitFor(t, 10*time.Second, "the durable ledger entry of "+id, func() bool {
			e, ok, err := a1.led.Get(ctx, id)
			if err == nil && ok {
				before[p] = e.Attempt
			}
			return err == nil && ok
		})
	}
	if err := a2.ms.Crash(); err != nil {
		t.Fatal(err)
	}
	crashed := time.Now()
	clustertest.WaitFor(t, 20*time.Second, "n1 to requeue n2's groups", func() bool { return strings.Contains(ev1.String(), "groups n2 had in flight") })
	t.Logf("n2's %d groups requeued %s after the crash", len(lost), time.Since(crashed).Round(time.Millisecond))
	m := regexp.MustCompile(`requeued (\d+) groups n2 had in flight`).FindStringSubmatch(ev1.String())
	if k, _ := strconv.Atoi(m[1]); k < 1 {
		t.Fatalf("requeued %d groups:\n%s", k, ev1.String())
	}
	clustertest.WaitFor(t, 60*time.Second, "n1 to finish the run", func() bool { _, ok := a1.FinalLedger(); return ok })
	retried := 0
	for _, p := range lost {
		e, _, err := a1.led.Get(ctx, fmt.Sprintf("t%s/%s", tok[1], p))
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case e.Attempt > before[p]:
			retried++ // requeued when n2 died and admitted again
		case e.State == "consumed":
			t.Errorf("prompt %s still in flight at the end", p)
		}
	}
	if retried == 0 {
		t.Errorf("none of n2's %d in-flight prompts was admitted again after its death (attempts before %v)", len(lost), before)
	}
	c, _ := a1.FinalLedger()
	b := config.Default().Trainer.MiniBatchSize
	if c.InFlight != 0 || c.Refused != 0 || c.Trained != steps*b {
		t.Errorf("final ledger %+v; want %d trained, none in flight, none refused", c, steps*b)
	}
}
