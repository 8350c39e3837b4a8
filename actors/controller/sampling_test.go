package controller

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/asyncrl/asyncrl/actors/filter"
	"github.com/asyncrl/asyncrl/messages"
)

// SkyRL's dynamic sampling carried into the running loop
// (skyrl-train/skyrl_train/utils/trainer_utils.py: handle_filter_sampling,
// handle_replace_sampling, zero_variance_filter; trainer.py
// handle_dynamic_sampling counts sample_batch_count and raises once it
// reaches max_sample_batches while more are needed).

func samplingConfig(b, w, s int64, mode filter.Mode, maxBatches int) Config {
	cfg := testConfig(b, w, s)
	fc := filter.DefaultConfig()
	fc.Mode, fc.NSamplesPerPrompt, fc.MaxSampleBatches = mode, 2, maxBatches
	cfg.Sampling = fc
	cfg.Rand = rand.New(rand.NewPCG(7, 7))
	return cfg
}

// startSampling builds a core from cfg, starts it and returns the groups
// it admitted.
func startSampling(t *testing.T, cfg Config) (*Core, []messages.PromptAssigned) {
	t.Helper()
	c, err := New(cfg, &seqSource{})
	if err != nil {
		t.Fatal(err)
	}
	c.Start(t0)
	return c, assigned(t, sent(c)["P"])
}

func bad(p messages.PromptAssigned) messages.GroupFiltered {
	return messages.GroupFiltered{GroupID: p.GroupID, PromptID: p.PromptID, Reason: messages.FilterZeroVariance}
}

func trains(t *testing.T, msgs []messages.Message) []messages.TrainBatch {
	t.Helper()
	var out []messages.TrainBatch
	for _, m := range msgs {
		out = append(out, m.(messages.TrainBatch))
	}
	return out
}

func decode(t *testing.T, tb messages.TrainBatch) []messages.Trajectory {
	t.Helper()
	b, err := messages.DecodeTokenBatch(tb.Batch.Inline)
	if err != nil {
		t.Fatal(err)
	}
	var out []messages.Trajectory
	for i := range b.Len() {
		tr, err := b.Trajectory(i)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tr)
	}
	return out
}

// filter: kept groups accumulate across generation batches (B arrivals
// each) until B are kept; the step records how many batches it took.
func TestFilterAccumulatesAcrossGenerationBatches(t *testing.T) {
	c, pa := startSampling(t, samplingConfig(2, 4, 1, filter.ModeFilter, 30))
	// Generation batch 1: one good, one bad. Batch 2: bad, good.
	c.Step(t0, groupReady(t, pa[0].GroupID, pa[0].PromptID, 0, 0, 1))
	c.Step(t0, bad(pa[1]))
	c.Step(t0, bad(pa[2]))
	if out := sent(c); len(out["T"]) != 0 {
		t.Fatalf("dispatched with 1 of 2 groups kept: %v", out["T"])
	}
	c.Step(t0, groupReady(t, pa[3].GroupID, pa[3].PromptID, 0, 1, 0))
	tb := trains(t, sent(c)["T"])
	if len(tb) != 1 || !slices.Equal(tb[0].GroupIDs, []string{pa[0].GroupID, pa[3].GroupID}) || tb[0].Trajectories != 4 {
		t.Fatalf("train batches %v", tb)
	}
	if st := c.Stats(); !slices.Equal(st.GenerationBatches, []int{2}) || st.Filtered != 3-1 {
		t.Fatalf("stats %+v", st)
	}
}

// filter: max_sample_batches counts generation batches; on exhaustion the
// held good groups go back to the queue (nothing lost) and the run hears
// SamplingExhausted.
func TestFilterMaxSampleBatchesRequeuesHeldGroups(t *testing.T) {
	c, pa := startSampling(t, samplingConfig(2, 4, 1, filter.ModeFilter, 2))
	c.Step(t0, groupReady(t, pa[0].GroupID, pa[0].PromptID, 0, 0, 1))
	c.Step(t0, bad(pa[1]))
	c.Step(t0, bad(pa[2]))
	if out := sent(c); len(out["T"]) != 0 {
		t.Fatalf("dispatched early: %v", out["T"])
	}
	c.Step(t0, bad(pa[3])) // 4 arrivals = 2 generation batches, 1 kept of 2
	out := sent(c)
	var ex []messages.SamplingExhausted
	var rq []messages.GroupRequeued
	for _, m := range out["S"] {
		switch v := m.(type) {
		case messages.SamplingExhausted:
			ex = append(ex, v)
		case messages.GroupRequeued:
			rq = append(rq, v)
		}
	}
	if len(ex) != 1 || ex[0].SampleBatches != 2 || ex[0].Good != 1 || ex[0].Requeued != 1 || ex[0].Mode != "filter" {
		t.Fatalf("exhausted %v", ex)
	}
	if len(rq) != 1 || rq[0].GroupID != pa[0].GroupID || rq[0].Reason != messages.RequeueSampling {
		t.Fatalf("requeued %v", rq)
	}
	if got := ledgerStates(out["L"])[messages.LedgerRequeued]; !slices.Equal(got, []string{pa[0].GroupID}) {
		t.Fatalf("ledger requeued %v", got)
	}
	// The prompt is admitted again (attempt 1): nothing lost.
	re := assigned(t, out["P"])
	if len(re) == 0 || re[0].PromptID != pa[0].PromptID || re[0].Attempt != 1 {
		t.Fatalf("re-admitted %v", re)
	}
	if st := c.Stats(); st.SamplingExhausted != 1 || st.RequeuedSampling != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestFilterUnboundedNeverExhausts(t *testing.T) {
	c, next := startSampling(t, samplingConfig(2, 4, 1, filter.ModeFilter, -1))
	for range 100 {
		c.Step(t0, bad(next[0]))
		out := sent(c)
		for _, m := range out["S"] {
			if _, ok := m.(messages.SamplingExhausted); ok {
				t.Fatal("exhausted with max_sample_batches -1")
			}
		}
		next = append(next[1:], assigned(t, out["P"])...)
	}
}

// replace: a generation batch of B=4 with 2 good groups (> 4 × 0.3) keeps
// 4 slots; the bad slots take whole copies of good groups — tokens,
// logprobs, loss masks, versions and the group id move together.
func TestReplaceFillsBadSlotsWithGoodGroups(t *testing.T) {
	c, pa := startSampling(t, samplingConfig(4, 4, 1, filter.ModeReplace, 30))
	g0 := groupReady(t, pa[0].GroupID, pa[0].PromptID, 0, 0, 1)
	g2 := groupReady(t, pa[2].GroupID, pa[2].PromptID, 0, 1, 0)
	c.Step(t0, g0)
	c.Step(t0, bad(pa[1]))
	c.Step(t0, g2)
	c.Step(t0, bad(pa[3]))
	tb := trains(t, sent(c)["T"])
	if len(tb) != 1 || tb[0].Trajectories != 8 || !slices.Equal(tb[0].GroupIDs, []string{pa[0].GroupID, pa[2].GroupID}) {
		t.Fatalf("train batches %v", tb)
	}
	ts := decode(t, tb[0])
	// Good slots keep their place: slot 0 is g0, slot 2 is g2.
	if ts[0].GroupID != pa[0].GroupID || ts[4].GroupID != pa[2].GroupID {
		t.Fatalf("good slots moved: %v %v", ts[0].GroupID, ts[4].GroupID)
	}
	// Two good, two bad: distinct donors (a permutation).
	d1, d3 := ts[2].GroupID, ts[6].GroupID
	if d1 == d3 || (d1 != pa[0].GroupID && d1 != pa[2].GroupID) || (d3 != pa[0].GroupID && d3 != pa[2].GroupID) {
		t.Fatalf("donors %s %s", d1, d3)
	}
	for _, slot := range []int{1, 3} {
		for k := range 2 {
			cp := ts[2*slot+k]
			src := ts[0+k]
			if cp.GroupID == pa[2].GroupID {
				src = ts[4+k]
			}
			if cp.Reward != src.Reward || !slices.Equal(cp.TokenIDs, src.TokenIDs) || !slices.Equal(cp.Logprobs, src.Logprobs) ||
				!slices.Equal(cp.LossMask, src.LossMask) || cp.ID != fmt.Sprintf("%s~copy%d", src.ID, slot) {
				t.Fatalf("slot %d traj %d is not a copy of %v: %+v", slot, k, src.ID, cp)
			}
		}
	}
	if st := c.Stats(); st.Replaced != 2 || !slices.Equal(st.GenerationBatches, []int{1}) {
		t.Fatalf("stats %+v", st)
	}
	// The same inputs with the same seed choose the same donors.
	c2, pa2 := startSampling(t, samplingConfig(4, 4, 1, filter.ModeReplace, 30))
	c2.Step(t0, groupReady(t, pa2[0].GroupID, pa2[0].PromptID, 0, 0, 1))
	c2.Step(t0, bad(pa2[1]))
	c2.Step(t0, groupReady(t, pa2[2].GroupID, pa2[2].PromptID, 0, 1, 0))
	c2.Step(t0, bad(pa2[3]))
	ts2 := decode(t, trains(t, sent(c2)["T"])[0])
	if ts2[2].GroupID != d1 || ts2[6].GroupID != d3 {
		t.Fatalf("not deterministic: %s %s vs %s %s", ts2[2].GroupID, ts2[6].GroupID, d1, d3)
	}
}

// replace: good ≤ total × min_replace_ratio discards the generation batch
// (its good group is filtered, reason resampled) and samples again; the
// SkyRL vector [1,1,2,2]/[u1,u1,u2,u2] with ratio 0.3 keeps sampling.
func TestReplaceTooFewGoodResamples(t *testing.T) {
	c, pa := startSampling(t, samplingConfig(4, 8, 1, filter.ModeReplace, 30))
	c.Step(t0, groupReady(t, pa[0].GroupID, pa[0].PromptID, 0, 0, 1)) // 1 good of 4: 1 > 1.2 is false
	for _, p := range pa[1:4] {
		c.Step(t0, bad(p))
	}
	out := sent(c)
	if len(out["T"]) != 0 {
		t.Fatalf("dispatched a batch with 1 good of 4: %v", out["T"])
	}
	if got := ledgerStates(out["L"])[messages.LedgerFiltered]; !slices.Contains(got, pa[0].GroupID) {
		t.Fatalf("the discarded batch's good group is not filtered: %v", got)
	}
	// Next generation batch: all four good → dispatched, 2 batches sampled.
	for _, p := range pa[4:8] {
		c.Step(t0, groupReady(t, p.GroupID, p.PromptID, 0, 0, 1))
	}
	tb := trains(t, sent(c)["T"])
	if len(tb) != 1 || len(tb[0].GroupIDs) != 4 {
		t.Fatalf("train %v", tb)
	}
	if st := c.Stats(); st.Resampled != 1 || st.Replaced != 0 || !slices.Equal(st.GenerationBatches, []int{2}) {
		t.Fatalf("stats %+v", st)
	}
}

// replace: max_sample_batches counts discarded generation batches too.
func TestReplaceMaxSampleBatches(t *testing.T) {
	c, next := startSampling(t, samplingConfig(2, 4, 1, filter.ModeReplace, 2))
	var ex []messages.SamplingExhausted
	for range 4 {
		c.Step(t0, bad(next[0]))
		out := sent(c)
		for _, m := range out["S"] {
			if v, ok := m.(messages.SamplingExhausted); ok {
				ex = append(ex, v)
			}
		}
		next = append(next[1:], assigned(t, out["P"])...)
	}
	if len(ex) != 1 || ex[0].SampleBatches != 2 || ex[0].Mode != "replace" {
		t.Fatalf("exhausted %v", ex)
	}
}

// zero_variance_mask: the group stays in the mini-batch and its live
// trajectories' loss masks are zeroed; a group with one live trajectory
// is kept unmasked (zero_variance_filter keeps it).
func TestZeroVarianceMaskZeroesLossMasks(t *testing.T) {
	c, pa := startSampling(t, samplingConfig(2, 4, 1, filter.ModeZeroVarianceMask, 30))
	flat := groupReady(t, pa[0].GroupID, pa[0].PromptID, 0, 1, 1)
	oneLive := groupReadyMasks(t, pa[1].GroupID, pa[1].PromptID, 0, [][]uint8{{0, 1, 1}, {0, 0, 0}}, 1, 1)
	c.Step(t0, flat)
	c.Step(t0, oneLive)
	tb := trains(t, sent(c)["T"])
	if len(tb) != 1 || tb[0].Trajectories != 4 {
		t.Fatalf("train %v", tb)
	}
	ts := decode(t, tb[0])
	for i, want := range [][]uint8{{0, 0, 0}, {0, 0, 0}, {0, 1, 1}, {0, 0, 0}} {
		if !slices.Equal(ts[i].LossMask, want) {
			t.Fatalf("trajectory %d loss mask %v, want %v", i, ts[i].LossMask, want)
		}
	}
	if st := c.Stats(); st.Masked != 2 || st.Filtered != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestReplaceNeedsRand(t *testing.T) {
	cfg := samplingConfig(2, 4, 1, filter.ModeReplace, 30)
	cfg.Rand = nil
	if _, err := New(cfg, &seqSource{}); err == nil {
		t.Fatal("replace mode without Rand accepted")
	}
}

// replace: a group already too stale to train is requeued before the
// generation batch is judged, so it takes no slot (it would otherwise be
// papered over with a copy of a good group).
func TestReplaceStaleGroupTakesNoSlot(t *testing.T) {
	cfg := samplingConfig(2, 2, 0, filter.ModeReplace, 30) // S=0, token measure
	cfg.Staleness.Measure = "token"
	c, pa := startSampling(t, cfg)
	c.Step(t0, groupReady(t, pa[0].GroupID, pa[0].PromptID, 0, 0, 1))
	c.Step(t0, groupReady(t, pa[1].GroupID, pa[1].PromptID, 0, 1, 0))
	if tb := trains(t, sent(c)["T"]); len(tb) != 1 {
		t.Fatalf("step 1: %v", tb)
	}
	c.Step(t0, messages.StepDone{Step: 1, NewVersion: 1})
	next := assigned(t, sent(c)["P"])
	// A lagging engine: version-0 tokens at trainer version 1 — stale.
	c.Step(t0, groupReady(t, next[0].GroupID, next[0].PromptID, 0, 0, 1))
	out := sent(c)
	if len(out["T"]) != 0 || c.Stats().RequeuedStale != 1 {
		t.Fatalf("stale group dispatched or not requeued: %v %+v", out["T"], c.Stats())
	}
	re := assigned(t, out["P"])
	c.Step(t0, groupReady(t, next[1].GroupID, next[1].PromptID, 1, 0, 1))
	c.Step(t0, groupReady(t, re[0].GroupID, re[0].PromptID, 1, 1, 0))
	tb := trains(t, sent(c)["T"])
	if len(tb) != 1 || len(tb[0].GroupIDs) != 2 || c.Stats().Replaced != 0 {
		t.Fatalf("step 2: %v %+v", tb, c.Stats())
	}
}

// replace: a bad group whose slot took a copy is consumed by the step
// (it keeps its place in the bound, as a trained group does), so replace
// generates B groups per step as SkyRL does; a discarded batch releases
// all of its slots, so the loop cannot deadlock.
func TestReplaceCapacity(t *testing.T) {
	c, pa := startSampling(t, samplingConfig(2, 2, 0, filter.ModeReplace, 30))
	c.Step(t0, groupReady(t, pa[0].GroupID, pa[0].PromptID, 0, 0, 1))
	c.Step(t0, bad(pa[1]))
	out := sent(c)
	if len(trains(t, out["T"])) != 1 || len(out["P"]) != 0 {
		t.Fatalf("want the step dispatched and nothing admitted before StepDone: %v", out)
	}
	if m := c.Staleness(); m.Filtered != 0 || m.Trained != 2 || m.Capacity != 0 {
		t.Fatalf("replaced slot released capacity: %+v", m)
	}
	c.Step(t0, messages.StepDone{Step: 1, NewVersion: 1})
	next := assigned(t, sent(c)["P"])
	if len(next) != 2 {
		t.Fatalf("admitted %d after StepDone, want B=2", len(next))
	}
	// 0 good of 2: discarded, both slots released and refilled.
	c.Step(t0, bad(next[0]))
	c.Step(t0, bad(next[1]))
	out = sent(c)
	if m := c.Staleness(); m.Filtered != 2 || len(assigned(t, out["P"])) != 2 || c.Stats().Resampled != 1 {
		t.Fatalf("discarded batch: %+v %v", m, out["P"])
	}
}

// zero_variance_mask: a mini-batch that masking would leave without a
// trained token is not sent (the built-in trainer refuses it; SkyRL would
// step on a zero loss): its groups are filtered, their slots released, and
// the step waits for groups with something to train — bounded by
// max_sample_batches.
func TestZeroVarianceMaskNeverSendsAnEmptyBatch(t *testing.T) {
	c, pa := startSampling(t, samplingConfig(2, 4, 1, filter.ModeZeroVarianceMask, 2))
	c.Step(t0, groupReady(t, pa[0].GroupID, pa[0].PromptID, 0, 1, 1))
	c.Step(t0, groupReady(t, pa[1].GroupID, pa[1].PromptID, 0, 0, 0))
	out := sent(c)
	if len(out["T"]) != 0 || c.Stats().Resampled != 1 || c.Staleness().Filtered != 2 {
		t.Fatalf("all-masked batch: %v %+v %+v", out["T"], c.Stats(), c.Staleness())
	}
	if got := ledgerStates(out["L"])[messages.LedgerFiltered]; len(got) != 2 {
		t.Fatalf("ledger filtered %v", got)
	}
	c.Step(t0, groupReady(t, pa[2].GroupID, pa[2].PromptID, 0, 1, 1))
	c.Step(t0, groupReady(t, pa[3].GroupID, pa[3].PromptID, 0, 0, 1))
	tb := trains(t, sent(c)["T"])
	if len(tb) != 1 || c.Stats().Masked != 2 || !slices.Equal(c.Stats().GenerationBatches, []int{2}) {
		t.Fatalf("train %v stats %+v", tb, c.Stats())
	}
	// Flat forever: max_sample_batches (2) ends it.
	c.Step(t0, messages.StepDone{Step: 1, NewVersion: 1})
	next := assigned(t, sent(c)["P"])
	var ex int
	for range 8 {
		if len(next) == 0 {
			break
		}
		c.Step(t0, groupReady(t, next[0].GroupID, next[0].PromptID, 1, 1, 1))
		out := sent(c)
		for _, m := range out["S"] {
			if _, ok := m.(messages.SamplingExhausted); ok {
				ex++
			}
		}
		next = append(next[1:], assigned(t, out["P"])...)
	}
	if ex == 0 {
		t.Fatal("flat groups forever never exhausted max_sample_batches")
	}
}
