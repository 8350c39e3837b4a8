package scale

import (
	"context"
	"testing"
	"time"
)

// The smoke level: 1,024 multi-turn trajectories in flight through the
// real actors, router and engines in process, with nothing lost and the
// counters consistent. Larger levels run in `make bench-scale`.
//
// The start barrier: the engines hold every request until the whole level
// is in flight, then release them together, so the peak is the level
// itself, not wherever the machine's pace puts it (without it a loaded
// 2-core machine peaked at 971 of 1,024, under the level's 95 % floor).
func TestSmokeLevelLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a pipeline")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const hold = 45 * time.Second
	res, err := Run(ctx, Options{MaxLevel: 1024, Timeout: time.Minute, StartHold: hold})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 {
		t.Fatalf("%d levels run, want the 1,024 one only", len(res))
	}
	r := res[0]
	t.Logf("%+v", r)
	if r.Failure != "" || r.Errors != 0 || r.Lost != 0 {
		t.Fatalf("failure %q, %d errors, %d lost", r.Failure, r.Errors, r.Lost)
	}
	if r.HoldSeconds <= 0 || r.HoldSeconds >= hold.Seconds() {
		t.Fatalf("held %.1fs: want released by the whole level in flight, before the %v cap", r.HoldSeconds, hold)
	}
	if r.PeakInFlight < 1024 {
		t.Errorf("peak in flight %d with the barrier, want the whole level (1,024)", r.PeakInFlight)
	}
	if r.MailboxDrops != 0 {
		t.Errorf("%d messages refused by full mailboxes", r.MailboxDrops)
	}
	// Every trajectory started ended finished; every group admitted was
	// judged; every turn went through the router in process.
	if r.Started != r.Finished || r.Started != (r.GroupsKept+r.GroupsFiltered)*8 || r.GroupsAdmitted != r.GroupsKept+r.GroupsFiltered {
		t.Errorf("started %d finished %d, admitted %d, kept %d + filtered %d", r.Started, r.Finished, r.GroupsAdmitted, r.GroupsKept, r.GroupsFiltered)
	}
	if r.Turns < r.Started || r.NetRequests != 0 || r.InProcRequests < 2*r.Turns {
		t.Errorf("turns %d for %d trajectories; %d requests in process, %d over the network", r.Turns, r.Started, r.InProcRequests, r.NetRequests)
	}
	if r.FDsPeak > 64 {
		t.Errorf("%d file descriptors at the peak: the in-process path holds no socket per request", r.FDsPeak)
	}
}

// The automatic time scale keeps trajectories in proportion to the ramp:
// it grows with the level, never below the floor, and a set scale wins.
func TestTimeScaleForGrowsWithLevel(t *testing.T) {
	var o Options
	prev := 0.0
	for _, n := range []int{1, 1024, 8192, 32768, 131072} {
		s := o.TimeScaleFor(n)
		if s < 0.02 || s < prev {
			t.Fatalf("TimeScaleFor(%d) = %v after %v: below the floor or shrinking", n, s, prev)
		}
		prev = s
	}
	if o.TimeScaleFor(131072) <= 4*o.TimeScaleFor(8192) {
		t.Fatalf("131,072 runs at %v, 8,192 at %v: not proportional to the level", o.TimeScaleFor(131072), o.TimeScaleFor(8192))
	}
	o.TimeScale = 0.3
	if got := o.TimeScaleFor(131072); got != 0.3 {
		t.Fatalf("a set TimeScale is overridden: %v", got)
	}
}

// Overload (issue 22: at 131,072 the controller's mailbox refused messages
// and 2,152 trajectories were lost): with a controller mailbox of 4 the
// bridges wait for room and the level still loses nothing. The start
// barrier puts the whole level in flight before any engine answers: the
// slowed admission otherwise let the first trajectories finish before the
// last started, and on a loaded machine the peak fell under the level's
// 95 % floor (CI, stop 45: 913 of 1,024) — the machine's pace, not a loss.
func TestOverloadedControllerLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a pipeline")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const hold = 45 * time.Second
	res, err := Run(ctx, Options{MaxLevel: 1024, Timeout: time.Minute, ControllerMailbox: 4, StartHold: hold})
	if err != nil {
		t.Fatal(err)
	}
	r := res[0]
	t.Logf("waits %d (%.2fs), drops %d, slow-consumer drops %d, held %.1fs of %.1fs, peak %d", r.MailboxWaits, r.MailboxWaitSeconds, r.MailboxDrops, r.SlowConsumerDrops, r.HoldSeconds, r.Seconds, r.PeakInFlight)
	if r.Failure != "" || r.Errors != 0 || r.Lost != 0 || r.MailboxDrops != 0 || r.SlowConsumerDrops != 0 {
		t.Fatalf("failure %q, %d errors, %d lost, %d refused by the mailbox, %d dropped by NATS", r.Failure, r.Errors, r.Lost, r.MailboxDrops, r.SlowConsumerDrops)
	}
	if r.HoldSeconds <= 0 || r.HoldSeconds >= hold.Seconds() {
		t.Fatalf("held %.1fs: want released by the whole level in flight, before the %v cap", r.HoldSeconds, hold)
	}
	if r.MailboxWaits == 0 {
		t.Fatal("the controller's mailbox of 4 never filled: the test did not overload it")
	}
	if r.Started != (r.GroupsKept+r.GroupsFiltered)*8 || r.GroupsAdmitted != r.GroupsKept+r.GroupsFiltered {
		t.Errorf("started %d, admitted %d, kept %d + filtered %d", r.Started, r.GroupsAdmitted, r.GroupsKept, r.GroupsFiltered)
	}
}
