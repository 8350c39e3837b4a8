package controller

import (
	"errors"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/messages"
)

// TestResumeInFlight: a core resumed with a batch out sends it again at
// Start, requeues the lost groups (queued prompts first), admits with
// epoch-numbered ids, and marks the batch's groups trained on its StepDone.
func TestResumeInFlight(t *testing.T) {
	cfg := testConfig(2, 4, 1)
	cfg.ResendTrainAfter = 5 * time.Second
	batch := &messages.TrainBatch{Step: 3, GroupIDs: []string{"p5#7", "p6#8"}}
	c, err := Resume(cfg, &seqSource{n: 20}, Recovery{Step: 3, Epoch: 2, InFlight: batch,
		Sent:   []Held{{GroupID: "p5#7", Prompt: Prompt{ID: "p5"}}, {GroupID: "p6#8", Prompt: Prompt{ID: "p6"}, Attempt: 1}},
		Lost:   []Held{{GroupID: "p7#9", Prompt: Prompt{ID: "p7"}, Attempt: 2}},
		Queued: []Held{{Prompt: Prompt{ID: "p4"}, Attempt: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	c.Start(t0)
	out := sent(c)
	if tb := out["T"]; len(tb) != 1 || tb[0].(messages.TrainBatch).Step != 3 {
		t.Fatalf("train sends %v, want the step-3 batch again", tb)
	}
	rq := out["S"]
	if len(rq) != 1 || rq[0].(messages.GroupRequeued).GroupID != "p7#9" || rq[0].(messages.GroupRequeued).Attempt != 3 {
		t.Fatalf("settled sends %v, want p7#9 requeued as attempt 3", rq)
	}
	as := assigned(t, out["P"])
	if len(as) < 2 || as[0].PromptID != "p4" || as[0].Attempt != 1 || as[1].PromptID != "p7" || as[1].Attempt != 3 {
		t.Fatalf("admitted %+v, want p4 (attempt 1) then p7 (attempt 3) first", as)
	}
	if as[0].GroupID != "p4#2.1" {
		t.Fatalf("first group id %s, want p4#2.1 (epoch 2)", as[0].GroupID)
	}
	c.Step(t0, messages.StepDone{Step: 3, NewVersion: 3})
	got := ledgerStates(sent(c)["L"])[messages.LedgerTrained]
	if len(got) != 2 || got[0] != "p5#7" || got[1] != "p6#8" {
		t.Fatalf("trained after StepDone %v, want [p5#7 p6#8]", got)
	}
}

// TestResumeRejectsInconsistentRecovery: a batch for another step, or its
// groups not listed, is refused before anything is built.
func TestResumeRejectsInconsistentRecovery(t *testing.T) {
	cfg := testConfig(2, 4, 1)
	batch := &messages.TrainBatch{Step: 3, GroupIDs: []string{"a#1"}}
	for name, r := range map[string]Recovery{
		"step":     {Step: 4, Epoch: 1, InFlight: batch, Sent: []Held{{GroupID: "a#1"}}},
		"sent":     {Step: 3, Epoch: 1, InFlight: batch},
		"order":    {Step: 3, Epoch: 1, InFlight: batch, Sent: []Held{{GroupID: "b#2"}}},
		"orphaned": {Step: 3, Epoch: 1, Sent: []Held{{GroupID: "a#1"}}},
		"epoch":    {Step: 3},
	} {
		if _, err := Resume(cfg, &seqSource{}, r); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: err %v, want ErrInvalidConfig", name, err)
		}
	}
}

// TestPlantLoseRequeued: the planted bug drops an aborted group's prompt
// instead of queueing it; the correct core queues it.
func TestPlantLoseRequeued(t *testing.T) {
	for _, lose := range []bool{false, true} {
		cfg := testConfig(1, 1, 0)
		cfg.Plant.LoseRequeued = lose
		c, err := New(cfg, &seqSource{limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		c.Start(t0)
		g := assigned(t, sent(c)["P"])[0]
		c.Step(t0, messages.EpisodeAborted{GroupID: g.GroupID, PromptID: g.PromptID})
		q := c.Queued()
		readmitted := assigned(t, sent(c)["P"])
		if lose != (len(readmitted) == 0) || len(q) != 0 {
			t.Fatalf("lose=%v: readmitted %v, queue %v", lose, readmitted, q)
		}
	}
}
