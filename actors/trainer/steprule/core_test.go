package steprule

import (
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/messages"
)

func batch(step int64) Received { return Received{Batch: messages.TrainBatch{Step: step}} }

// TestRule: each case steps a core from a version with inputs; after each
// input the Ready (one effect a line, "" for none) must be as listed.
func TestRule(t *testing.T) {
	type step struct {
		in   Input
		want string
	}
	for _, tc := range []struct {
		name  string
		from  int64
		steps []step
		// version, training and waiting at the end.
		version, training int64
		waiting           int
	}{
		{name: "the next step trains, then is announced", from: 0, steps: []step{
			{batch(1), "train step 1 from version 0"},
			{Trained{Step: 1, Version: 1}, "announce step 1 (version 1)"},
		}, version: 1},
		{name: "an old step is answered again with the version held, not trained", from: 5, steps: []step{
			{batch(3), "announce step 3 again (version 5)"},
			{batch(5), "announce step 5 again (version 5)"},
		}, version: 5},
		{name: "a future step is refused and changes nothing", from: 2, steps: []step{
			{batch(4), "trainer: batch for step 4 but the trainer holds version 2"},
			{batch(3), "train step 3 from version 2"},
		}, version: 2, training: 3},
		{name: "a retransmission of the batch training waits and is answered once it is done", from: 0, steps: []step{
			{batch(1), "train step 1 from version 0"},
			{batch(1), ""},
			{batch(1), ""},
			{Trained{Step: 1, Version: 1}, "announce step 1 (version 1)\nannounce step 1 again (version 1)\nannounce step 1 again (version 1)"},
		}, version: 1},
		{name: "the next step's batch waits behind the step training and trains after it", from: 0, steps: []step{
			{batch(1), "train step 1 from version 0"},
			{batch(2), ""},
			{Trained{Step: 1, Version: 1}, "announce step 1 (version 1)\ntrain step 2 from version 1"},
		}, version: 1, training: 2},
		{name: "a failed step keeps the version; its retransmission trains it again", from: 0, steps: []step{
			{batch(1), "train step 1 from version 0"},
			{batch(1), ""},
			{Failed{Step: 1, Version: 0, Err: "boom"}, "train step 1 from version 0"},
		}, version: 0, training: 1},
		{name: "a step whose publish failed is not announced; its retransmission publishes it again, never trains it again", from: 0, steps: []step{
			{batch(1), "train step 1 from version 0"},
			{batch(1), ""},
			{Failed{Step: 1, Version: 1, Err: "publish"}, "publish step 1 again (version 1)"},
			{batch(1), ""},
			{Failed{Step: 1, Version: 1, Err: "publish again"}, "publish step 1 again (version 1)"},
			{Trained{Step: 1, Version: 1}, "announce step 1 (version 1)"},
		}, version: 1},
		{name: "while a step is unpublished an older step is answered with the published version and a later one is refused", from: 2, steps: []step{
			{batch(3), "train step 3 from version 2"},
			{Failed{Step: 3, Version: 3, Err: "publish"}, ""},
			{batch(2), "announce step 2 again (version 2)"},
			{batch(4), "trainer: batch for step 4 but the trainer holds version 2"},
			{batch(3), "publish step 3 again (version 3)"},
			{Trained{Step: 3, Version: 3}, "announce step 3 (version 3)"},
			{batch(3), "announce step 3 again (version 3)"},
			{batch(4), "train step 4 from version 3"},
		}, version: 3, training: 4},
		{name: "a report for a step not training is ignored", from: 3, steps: []step{
			{Trained{Step: 4, Version: 4}, ""},
			{Failed{Step: 3, Version: 9}, ""},
			{batch(4), "train step 4 from version 3"},
			{Trained{Step: 2, Version: 2}, ""},
		}, version: 3, training: 4},
		{name: "a trainer resumed at a version answers below it and trains above", from: 7, steps: []step{
			{batch(8), "train step 8 from version 7"},
			{batch(7), ""},
			{batch(9), ""},
			{Trained{Step: 8, Version: 8}, "announce step 8 (version 8)\nannounce step 7 again (version 8)\ntrain step 9 from version 8"},
		}, version: 8, training: 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := New(tc.from)
			for i, s := range tc.steps {
				c.Step(time.Time{}, s.in)
				c.Tick(time.Time{}) // nothing is timed: a tick never adds an effect
				if got := c.Ready().String(); got != s.want {
					t.Fatalf("input %d (%T %+v): Ready\n%s\nwant\n%s", i, s.in, s.in, got, s.want)
				}
				if c.Ready().Empty() != (s.want == "") {
					t.Fatalf("input %d: Empty() = %v with %q", i, c.Ready().Empty(), s.want)
				}
				c.Advance()
			}
			if c.Version() != tc.version || c.Training() != tc.training || c.Waiting() != tc.waiting {
				t.Errorf("end: version %d training %d waiting %d, want %d %d %d",
					c.Version(), c.Training(), c.Waiting(), tc.version, tc.training, tc.waiting)
			}
		})
	}
}

// TestTrainCarriesTheBatch: the Train effect hands the shell the batch
// as received (its groups and bytes), and Advance forgets the Ready.
func TestTrainCarriesTheBatch(t *testing.T) {
	c := New(0)
	tb := messages.TrainBatch{Step: 1, GroupIDs: []string{"g1", "g2"}, Groups: []messages.GroupRef{{GroupID: "g1", Batch: messages.BatchRef{Inline: []byte{1, 2, 3}}}}}
	c.Step(time.Time{}, Received{Batch: tb})
	rd := c.Ready()
	if len(rd.Effects) != 1 {
		t.Fatalf("Ready %v", rd)
	}
	tr, ok := rd.Effects[0].(Train)
	if !ok || tr.From != 0 || tr.Batch.Step != 1 || strings.Join(tr.Batch.GroupIDs, ",") != "g1,g2" || len(tr.Batch.Groups[0].Batch.Inline) != 3 {
		t.Fatalf("effect %#v", rd.Effects[0])
	}
	c.Advance()
	if !c.Ready().Empty() {
		t.Fatalf("Ready after Advance: %v", c.Ready())
	}
}
