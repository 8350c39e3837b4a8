package sampling

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/actors/filter"
	"github.com/asyncrl/asyncrl/messages"
)

func TestDecisions(t *testing.T) {
	fc := filter.DefaultConfig()
	fc.NSamplesPerPrompt = 4
	for _, tc := range []struct {
		name     string
		mode     filter.Mode
		rewards  []float64
		wantKept bool
		reason   messages.FilterReason
	}{
		{"variance kept", filter.ModeFilter, []float64{0, 1, 0, 0}, true, ""},
		{"all zero dropped", filter.ModeFilter, []float64{0, 0, 0, 0}, false, messages.FilterZeroVariance},
		{"all one dropped", filter.ModeFilter, []float64{1, 1, 1, 1}, false, messages.FilterZeroVariance},
		{"mode none keeps", filter.ModeNone, []float64{0, 0, 0, 0}, true, ""},
		// SkyRL (skyrl-train trainer_utils.py handle_filter_sampling):
		// np.std of one value is 0, of a NaN is NaN — both dropped.
		{"one trajectory with n 4 dropped", filter.ModeFilter, []float64{1}, false, messages.FilterSingleTrajectory},
		{"NaN reward dropped", filter.ModeFilter, []float64{0, math.NaN(), 1, 0}, false, messages.FilterNaN},
		{"replace: bad group dropped (its slot is refilled at assembly)", filter.ModeReplace, []float64{1, 1, 1, 1}, false, messages.FilterZeroVariance},
		// zero_variance_mask keeps the group; the controller masks its loss.
		{"zero_variance_mask keeps a flat group", filter.ModeZeroVarianceMask, []float64{1, 1, 1, 1}, true, ""},
		{"empty group dropped", filter.ModeFilter, nil, false, messages.FilterEmpty},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := fc
			cfg.Mode = tc.mode
			c, err := New(Config{Filter: cfg, RunID: "r", Sender: "s", Kept: "K", Filtered: "F"})
			if err != nil {
				t.Fatal(err)
			}
			g := messages.GroupReady{GroupID: "p1#1", PromptID: "p1", Rewards: tc.rewards, OldestVersion: 3}
			c.Step(time.Time{}, g)
			sends := c.Drain().Sends
			if len(sends) != 1 {
				t.Fatalf("sends = %v", sends)
			}
			if tc.wantKept {
				if sends[0].Subject != "K" || sends[0].Msg.(messages.GroupReady).GroupID != "p1#1" {
					t.Fatalf("kept group not forwarded unchanged: %v", sends[0])
				}
				if c.Stats().Kept != 1 {
					t.Fatalf("stats %+v", c.Stats())
				}
				return
			}
			f, ok := sends[0].Msg.(messages.GroupFiltered)
			if sends[0].Subject != "F" || !ok || f.GroupID != "p1#1" || f.PromptID != "p1" || f.Reason != tc.reason || f.Version != 3 {
				t.Fatalf("drop = %v", sends[0])
			}
			if c.Stats().Dropped != 1 {
				t.Fatalf("stats %+v", c.Stats())
			}
		})
	}
}

func TestIgnoresOtherMessages(t *testing.T) {
	c, _ := New(Config{Filter: filter.DefaultConfig(), Kept: "K", Filtered: "F"})
	c.Step(time.Time{}, messages.StepDone{Step: 1})
	if !c.Empty() {
		t.Fatalf("StepDone produced effects")
	}
}

func TestConfigValidate(t *testing.T) {
	if _, err := New(Config{Filter: filter.DefaultConfig()}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("missing subjects accepted: %v", err)
	}
	bad := filter.DefaultConfig()
	bad.Mode = "bogus"
	if _, err := New(Config{Filter: bad, Kept: "K", Filtered: "F"}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("bad mode accepted: %v", err)
	}
}

// The reward tally counts every judged group by the version that
// generated it, the dropped ones too: a filtered run's trained batches
// leave out exactly the groups a better policy gets right every time.
func TestRewardsTallyKeptAndDroppedByVersion(t *testing.T) {
	fc := filter.DefaultConfig()
	fc.NSamplesPerPrompt = 4
	c, err := New(Config{Filter: fc, Kept: "K", Filtered: "F"})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []messages.GroupReady{
		{GroupID: "a", Rewards: []float64{0, 1, 0, 1}, OldestVersion: 0},            // kept
		{GroupID: "b", Rewards: []float64{1, 1, 1, 1}, OldestVersion: 0},            // dropped: zero variance
		{GroupID: "c", Rewards: []float64{0.5, math.NaN(), 1, 0}, OldestVersion: 2}, // dropped: NaN
		{GroupID: "d", OldestVersion: 2},                                            // empty: nothing to tally
	} {
		c.Step(time.Time{}, g)
	}
	st := c.Stats()
	if st.Kept != 1 || st.Dropped != 3 {
		t.Fatalf("decisions %+v", st)
	}
	want := map[int64]RewardTally{
		0: {Groups: 2, Trajectories: 8, Sum: 6},
		2: {Groups: 1, Trajectories: 3, NaN: 1, Sum: 1.5},
	}
	if len(st.Rewards) != len(want) {
		t.Fatalf("tally %+v, want %+v", st.Rewards, want)
	}
	for v, w := range want {
		if st.Rewards[v] != w {
			t.Fatalf("version %d: %+v, want %+v", v, st.Rewards[v], w)
		}
	}
	if m := st.Rewards[0].Mean(); m != 0.75 {
		t.Fatalf("mean of version 0 = %v, want 0.75", m)
	}
	// Stats is a copy: stepping on does not change it.
	c.Step(time.Time{}, messages.GroupReady{GroupID: "e", Rewards: []float64{1, 0, 0, 0}, OldestVersion: 0})
	if st.Rewards[0].Groups != 2 || c.Stats().Rewards[0].Groups != 3 {
		t.Fatalf("Stats shares its map: %+v / %+v", st.Rewards[0], c.Stats().Rewards[0])
	}
}
