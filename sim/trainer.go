package sim

import (
	"fmt"
	"math"
	"time"

	"github.com/asyncrl/asyncrl/actors/trainer/microbatch"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport/memhub"
)

// masked marks, in the trainer's oldest-version map, a group whose every
// loss mask the controller zeroed (zero_variance_mask).
const masked = math.MinInt64

// trainerDurable is what the trainer checkpoints: it survives a crash.
type trainerDurable struct {
	// next is the next step to train; the trainer holds version next−1.
	next int64
	// lastBatch is the input log's newest entry (written on receipt).
	lastBatch *messages.TrainBatch
}

// trainerNode is the trainer stand-in: it collects a mini-batch (the
// controller sends exactly B checked groups), "trains" for the modelled
// duration, commits its durable state and announces StepDone.
type trainerNode struct {
	w       *world
	bus     *memhub.Bus
	durable trainerDurable
	down    int
	inc     int
	busy    int64 // step being trained, 0 when idle
}

var (
	subjTrain = plan.Train
	subjSteps = plan.Steps
)

func newTrainer(w *world) *trainerNode {
	return &trainerNode{w: w, bus: w.hub.Connect("trainer"), durable: trainerDurable{next: 1}}
}

func (t *trainerNode) start() {
	t.w.subscribe(t.bus, subjTrain, func(m messages.Message) {
		if tb, ok := m.(messages.TrainBatch); ok {
			t.onBatch(tb)
		}
	})
	t.heartbeat()
}

// heartbeat re-announces the newest StepDone, so a lost one (or a
// publisher that restarted) catches up.
func (t *trainerNode) heartbeat() {
	t.w.after(500*msec, "", func() {
		if t.down == 0 && t.durable.next > 1 {
			t.sendDone(t.durable.next - 1)
		}
		t.heartbeat()
	})
}

func (t *trainerNode) sendDone(step int64) {
	t.w.send(t.bus, subjSteps, messages.StepDone{Header: messages.Header{RunID: runID, Sender: "trainer", Version: step - 1},
		Step: step, NewVersion: step})
}

func (t *trainerNode) onBatch(m messages.TrainBatch) {
	w := t.w
	if t.down > 0 {
		w.logf("trainer is down: batch for step %d lost", m.Step)
		return
	}
	switch {
	case m.Step < t.durable.next:
		t.sendDone(m.Step) // already trained: answer again, do not retrain
		return
	case m.Step > t.durable.next:
		w.fail(InvProtocol, "trainer at step %d received a batch for step %d", t.durable.next, m.Step)
		return
	case t.busy == m.Step:
		return // a retransmission of the batch being trained
	}
	b := m
	b.GroupIDs = append([]string(nil), m.GroupIDs...)
	t.durable.lastBatch = &b
	t.train(b)
}

// prepare decodes the batch's Arrow token data, verifies its checksum,
// finds each group's oldest generated token and packs the trajectories
// into microbatches over two data-parallel ranks. It returns the oldest
// version per group and the modelled compute time.
func (t *trainerNode) prepare(b messages.TrainBatch) (map[string]int64, time.Duration, bool) {
	w := t.w
	if got := checksumOf(b.Batch.Inline); b.Batch.Checksum != "" && got != b.Batch.Checksum {
		w.fail(InvWire, "train batch for step %d: checksum %s, message says %s", b.Step, short(got), short(b.Batch.Checksum))
		return nil, 0, false
	}
	tb, err := messages.DecodeTokenBatch(b.Batch.Inline)
	if err != nil {
		w.fail(InvWire, "train batch for step %d: %v", b.Step, err)
		return nil, 0, false
	}
	oldest := map[string]int64{}
	tokens := make([]int, tb.Len())
	for i := 0; i < tb.Len(); i++ {
		tr, err := tb.Trajectory(i)
		if err != nil {
			w.fail(InvWire, "train batch for step %d: %v", b.Step, err)
			return nil, 0, false
		}
		tokens[i] = len(tr.TokenIDs)
		lo, ok := oldest[tr.GroupID]
		if !ok {
			lo = math.MaxInt64
		}
		for j, v := range tr.PolicyVersions {
			if tr.LossMask[j] == 1 {
				lo = min(lo, int64(v))
			}
		}
		oldest[tr.GroupID] = lo
	}
	for g, lo := range oldest {
		if lo == math.MaxInt64 {
			oldest[g] = masked // zero_variance_mask: no token of it is trained
		}
	}
	cfg := microbatch.DefaultConfig()
	cfg.MaxTokensPerMicrobatch, cfg.DPSize = 256, 2
	plan, err := microbatch.Build(tokens, cfg)
	if err != nil {
		w.fail(InvProtocol, "microbatch plan for step %d: %v", b.Step, err)
		return nil, 0, false
	}
	// Every trajectory is trained exactly once: the plan must cover each
	// index once across ranks and microbatches.
	seen := make([]int, len(tokens))
	passes := 0
	for _, r := range plan.Ranks {
		passes = max(passes, len(r.Microbatches))
		for _, mb := range r.Microbatches {
			for _, i := range mb.Indices {
				seen[i]++
			}
		}
	}
	for i, n := range seen {
		w.orc.checks++
		if n != 1 {
			w.fail(InvTrainedTwice, "microbatch plan for step %d trains trajectory %d %d times", b.Step, i, n)
			return nil, 0, false
		}
	}
	return oldest, w.wl.TrainTime + time.Duration(passes)*20*msec, true
}

func (t *trainerNode) train(b messages.TrainBatch) {
	w := t.w
	oldest, d, ok := t.prepare(b)
	if !ok {
		return
	}
	t.busy = b.Step
	inc := t.inc
	w.after(d, fmt.Sprintf("trainer: step %d trained on version %d: %v", b.Step, b.Step-1, b.GroupIDs), func() {
		if t.inc != inc {
			return // crashed meanwhile: the step is lost, the controller resends
		}
		t.busy = 0
		w.orc.trainedBatch(b.Step, b.Step-1, b.GroupIDs, oldest)
		if b.Step >= t.durable.next {
			t.durable.next = b.Step + 1
		}
		t.sendDone(b.Step)
	})
}

func (t *trainerNode) crash() {
	t.down++
	t.inc++
	t.busy = 0
}

func (t *trainerNode) restart() {
	t.down--
	if t.down > 0 {
		return
	}
	// Restore the durable state. A committed step is never trained again:
	// the input log's batch is replayed only if its step is not committed.
	if lb := t.durable.lastBatch; lb != nil {
		if lb.Step >= t.durable.next {
			t.train(*lb)
		} else if t.w.cfg.has(BugTrainerRetrainsOnRestart) {
			t.w.logf("trainer: replaying input log step %d (planted bug)", lb.Step)
			t.train(*lb)
		}
	}
	if t.durable.next > 1 {
		t.sendDone(t.durable.next - 1)
	}
}
