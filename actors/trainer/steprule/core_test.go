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

// TestRetryWithBackoff: with a Retry the held step's publish is tried
// again when its wait is over (1 s, then 2 s, capped at 3 s), a
// retransmission of its batch meanwhile does not publish sooner, and
// after Attempts tries the rule gives up and publishes no more; a try
// that succeeds announces the step and resets the count.
func TestRetryWithBackoff(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	type step struct {
		at   time.Duration
		in   Input // nil: a Tick
		want string
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{name: "tries again after each wait, then succeeds", steps: []step{
			{0, batch(1), "train step 1 from version 0"},
			{0, Failed{Step: 1, Version: 1, Err: "no engine"}, ""},
			{999 * time.Millisecond, nil, ""},
			{999 * time.Millisecond, batch(1), ""}, // a retransmission does not publish sooner
			{time.Second, nil, "publish step 1 again (version 1)"},
			{time.Second, Failed{Step: 1, Version: 1, Err: "no engine"}, ""},
			{2999 * time.Millisecond, nil, ""},
			{3 * time.Second, nil, "publish step 1 again (version 1)"},
			{3 * time.Second, Trained{Step: 1, Version: 1}, "announce step 1 (version 1)"}, // it answers the retransmission too
			{3 * time.Second, batch(2), "train step 2 from version 1"},
			// The count starts again for the next step.
			{3 * time.Second, Failed{Step: 2, Version: 2, Err: "no engine"}, ""},
			{4 * time.Second, nil, "publish step 2 again (version 2)"},
		}},
		{name: "gives up after Attempts tries, the waits capped", steps: []step{
			{0, batch(1), "train step 1 from version 0"},
			{0, Failed{Step: 1, Version: 1, Err: "e1"}, ""},
			{time.Second, nil, "publish step 1 again (version 1)"},
			{time.Second, Failed{Step: 1, Version: 1, Err: "e2"}, ""},
			{3 * time.Second, nil, "publish step 1 again (version 1)"},
			{3 * time.Second, Failed{Step: 1, Version: 1, Err: "e3"}, ""},
			{5999 * time.Millisecond, nil, ""}, // 4 s doubled, capped at 3 s
			{6 * time.Second, nil, "publish step 1 again (version 1)"},
			{6 * time.Second, Failed{Step: 1, Version: 1, Err: "e4"}, "give up step 1: version 1 not published after 4 attempts: e4"},
			{time.Hour, nil, ""},
			{time.Hour, batch(1), ""},
			{time.Hour, batch(0), "announce step 0 again (version 0)"},
		}},
		{name: "a failure before the trainer stepped is not a publish try", steps: []step{
			{0, batch(1), "train step 1 from version 0"},
			{0, Failed{Step: 1, Version: 0, Err: "decode"}, ""},
			{time.Hour, nil, ""},
			{time.Hour, batch(1), "train step 1 from version 0"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewRetrying(0, Retry{Attempts: 4, Backoff: time.Second, MaxBackoff: 3 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range tc.steps {
				if s.in == nil {
					c.Tick(at(s.at))
				} else {
					c.Step(at(s.at), s.in)
				}
				if got := c.Ready().String(); got != s.want {
					t.Fatalf("input %d at %v (%T %+v): Ready\n%s\nwant\n%s", i, s.at, s.in, s.in, got, s.want)
				}
				c.Advance()
			}
		})
	}
}

func TestRetryValidate(t *testing.T) {
	for _, r := range []Retry{{}, {Attempts: 1, Backoff: -1}, {Attempts: 2, Backoff: time.Second, MaxBackoff: time.Millisecond}} {
		if _, err := NewRetrying(0, r); err == nil {
			t.Errorf("NewRetrying(%+v) accepted", r)
		}
	}
	if _, err := NewRetrying(0, Retry{Attempts: 1}); err != nil {
		t.Errorf("Attempts 1, no backoff: %v", err)
	}
}

// TestRetryOf: publisher.attempts and publisher.retry_backoff map onto a
// valid Retry whose waits double up to a minute (or the backoff itself
// when that is longer).
func TestRetryOf(t *testing.T) {
	for _, tc := range []struct {
		attempts int
		backoff  time.Duration
		want     Retry
	}{
		{6, 2 * time.Second, Retry{Attempts: 6, Backoff: 2 * time.Second, MaxBackoff: time.Minute}},
		{3, 2 * time.Minute, Retry{Attempts: 3, Backoff: 2 * time.Minute, MaxBackoff: 2 * time.Minute}},
	} {
		r := RetryOf(tc.attempts, tc.backoff)
		if r != tc.want || r.Validate() != nil {
			t.Errorf("RetryOf(%d, %v) = %+v (%v), want %+v", tc.attempts, tc.backoff, r, r.Validate(), tc.want)
		}
	}
	if w := RetryOf(6, 2*time.Second).wait(6); w != time.Minute {
		t.Errorf("sixth wait %v, want the 1m cap", w)
	}
}
