package agent

import (
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/asyncrl/asyncrl/cluster/internal/clustertest"
	"github.com/asyncrl/asyncrl/cluster/ledger"
	"github.com/asyncrl/asyncrl/cluster/placement"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/internal/syncbuf"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// A holder deposed after its trainer made a step and before that step's
// fenced progress write must leave no trained mark for the step: a prompt
// counts as trained only together with the durable step that trained it.
// Here a newer claimant fences n1 right before it saves step 3; n1's save
// is refused, its term ends, it takes the lease again and finishes the
// run. The final ledger must show exactly steps × B trained. Before the
// fix the controller's own trained events for step 3 reached the durable
// ledger through the mirror, and the run ended with (steps+1) × B.
func TestDeposedHolderLeavesNoTrainedMarks(t *testing.T) {
	url := externalBus(t)
	const steps, deposeAt = 6, 3
	var ev syncbuf.Buffer
	cfg := agentRunConfig(t, steps)
	// The intruder's ledger handle, on a connection of its own.
	opts := natsbus.DefaultOptions()
	opts.URL = url
	b, err := natsbus.Connect(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	var once sync.Once
	deposed := make(chan ledger.Progress, 1)
	a := testAgent(t, url, Config{Name: "n1", Roles: []string{placement.Trainer, placement.Engine}, Run: cfg, Events: &ev})
	defer a.Stop()
	a.beforeSave = func(ctx context.Context, step int64) {
		if step != deposeAt {
			return
		}
		once.Do(func() {
			l, err := ledger.Open(ctx, b.Conn(), ledger.DefaultConfig(cfg.Run.ID))
			if err != nil {
				t.Error(err)
				return
			}
			p, _, err := l.Progress(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			// One above n1's token: its next lease (resign, then create:
			// two more revisions) is still newer.
			p, err = l.Claim(ctx, p.Token+1, "intruder")
			if err != nil {
				t.Error(err)
				return
			}
			deposed <- p
		})
	}
	clustertest.WaitFor(t, 90*time.Second, "n1 to finish the run", func() bool {
		_, ok := a.FinalLedger()
		return ok
	})
	var p ledger.Progress
	select {
	case p = <-deposed:
	default:
		t.Fatal("the hook never deposed n1")
	}
	if p.Step != deposeAt-1 {
		t.Fatalf("deposed at durable step %d; want %d", p.Step, deposeAt-1)
	}
	out := ev.String()
	if !strings.Contains(out, "training failed") || strings.Count(out, "lease trainer acquired") < 2 {
		t.Fatalf("n1 was not deposed and re-elected:\n%s", out)
	}
	c, _ := a.FinalLedger()
	bsz := config.Default().Trainer.MiniBatchSize
	if c.Trained != steps*bsz || c.InFlight != 0 || c.Refused != 0 {
		t.Errorf("final ledger %+v; want %d trained (B=%d per durable step), none in flight, none refused\n%s", c, steps*bsz, bsz, out)
	}
	// Every trained mark belongs to a step some progress write made durable:
	// none carries the fenced term's step 3 twice.
	l, err := ledger.Open(context.Background(), b.Conn(), ledger.DefaultConfig(cfg.Run.ID))
	if err != nil {
		t.Fatal(err)
	}
	all, err := l.Entries(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	perStep := map[int64]int{}
	for _, e := range all {
		if e.State == messages.LedgerTrained {
			perStep[e.Step]++
		}
	}
	for s := int64(1); s <= steps; s++ {
		if perStep[s] != bsz {
			t.Errorf("step %d: %d prompts trained; want %d (all steps: %v)", s, perStep[s], bsz, perStep)
		}
	}
}

// The term's trajectory buffer vanishes mid-run (its server's copy lost:
// here deleted). Either the holder's probes see it and the term steps
// down after UnhealthyAfter, or — first, when a step is fetching its
// groups from the buffer (batches by reference) — the trainer's fetch
// fails naming the stream and the term fails; either way with an event
// naming the buffer (never a silent stall), a new term starts from the
// durable step with a fresh buffer, and the run finishes with every
// durable step's prompts trained once.
func TestLostBufferEndsTheTermNotTheRun(t *testing.T) {
	url := externalBus(t)
	const steps = 6
	var ev syncbuf.Buffer
	a := testAgent(t, url, Config{Name: "n1", Roles: []string{placement.Trainer, placement.Engine}, Run: agentRunConfig(t, steps),
		Events: &ev, UnhealthyAfter: 2 * time.Second})
	defer a.Stop()
	clustertest.WaitFor(t, 30*time.Second, "n1 to train 2 steps", func() bool { return lastStep(ev.String()) >= 2 })
	tok := regexp.MustCompile(`lease trainer acquired token (\d+)`).FindStringSubmatch(ev.String())
	if tok == nil {
		t.Fatalf("no lease line:\n%s", ev.String())
	}
	js, err := jetstream.New(a.bus.Conn())
	if err != nil {
		t.Fatal(err)
	}
	stream := "groups-local-t" + tok[1]
	if err := js.DeleteStream(context.Background(), stream); err != nil {
		t.Fatalf("delete %s: %v", stream, err)
	}
	clustertest.WaitFor(t, 90*time.Second, "n1 to finish the run", func() bool {
		_, ok := a.FinalLedger()
		return ok
	})
	out := ev.String()
	fetch := regexp.MustCompile(`training failed: trainer: step \d+: trainer: fetch group \S+ from stream ` + regexp.QuoteMeta(stream) + ` .*stream not found`)
	byProbe := strings.Contains(out, "term dependency "+stream+" failing")
	switch {
	case byProbe:
		for _, want := range []string{"term stalled: " + stream + " failing for", "training failed: term stalled (dependency)"} {
			if !strings.Contains(out, want) {
				t.Errorf("no %q event:\n%s", want, out)
			}
		}
		if got := testutil.ToFloat64(a.stepdowns.WithLabelValues("dependency")); got < 1 {
			t.Errorf("asyncrl_node_term_stepdowns_total{reason=dependency} = %v; want ≥ 1", got)
		}
	case !fetch.MatchString(out):
		t.Errorf("neither the probes (term dependency %s failing) nor the trainer's fetch (training failed … from stream %s … stream not found) ended the term:\n%s", stream, stream, out)
	}
	if n := strings.Count(out, "lease trainer acquired"); n < 2 {
		t.Errorf("%d terms; want a second one after the stall:\n%s", n, out)
	}
	c, _ := a.FinalLedger()
	bsz := config.Default().Trainer.MiniBatchSize
	if c.Trained != steps*bsz || c.InFlight != 0 || c.Refused != 0 {
		t.Errorf("final ledger %+v; want %d trained, none in flight, none refused\n%s", c, steps*bsz, out)
	}
}
