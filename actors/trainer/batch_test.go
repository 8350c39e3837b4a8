package trainer

import (
	"math"
	"testing"

	"github.com/asyncrl/asyncrl/actors/trainer/microbatch"
	"github.com/asyncrl/asyncrl/messages"
)

func traj(id, group string, reward float32, versions ...int32) messages.Trajectory {
	n := len(versions) + 1
	t := messages.Trajectory{ID: id, GroupID: group, Reward: reward, PromptLen: 1}
	for i := range n {
		t.TokenIDs = append(t.TokenIDs, int32(3+i))
		t.Logprobs = append(t.Logprobs, 0)
		t.LossMask = append(t.LossMask, 0)
		v := int32(0)
		if i > 0 {
			v = versions[i-1]
			t.Logprobs[i], t.LossMask[i] = -1, 1
		}
		t.PolicyVersions = append(t.PolicyVersions, v)
	}
	return t
}

func TestPrepareAdvantagesPerGroup(t *testing.T) {
	tb, _ := messages.NewTokenBatch(messages.BatchSpec{Vocab: 98})
	for _, tr := range []messages.Trajectory{
		traj("a0", "a", 1, 5, 5), traj("a1", "a", 0, 5, 6), // group a: scores 1, 0
		traj("b0", "b", 0.5, 3), traj("b1", "b", 0.5, 4, 4, 4), // group b: zero variance
	} {
		if err := tb.Append(tr); err != nil {
			t.Fatal(err)
		}
	}
	p, err := Prepare(tb, true, microbatch.DefaultConfig(), 6)
	if err != nil {
		t.Fatal(err)
	}
	// group a: mean 0.5, unbiased std √0.5 → ±0.5/(0.7071+1e-6).
	want := []float64{0.5 / (math.Sqrt(0.5) + 1e-6), -0.5 / (math.Sqrt(0.5) + 1e-6), 0, 0}
	for i, s := range p.Batch.Sequences {
		if math.Abs(float64(s.Advantage)-want[i]) > 1e-5 {
			t.Errorf("advantage[%d] = %v, want %v", i, s.Advantage, want[i])
		}
	}
	if p.Groups != 2 || p.Trajectories != 4 || p.Tok != 3+3+2+4 {
		t.Fatalf("sizes %+v", p)
	}
	if p.RewardMean != 0.5 {
		t.Fatalf("reward mean %v", p.RewardMean)
	}
	// oldest model token is version 3 (b0) at trainer version 6.
	if p.StalenessMax != 3 {
		t.Fatalf("staleness max %d, want 3", p.StalenessMax)
	}
	if got := len(p.Plan.Ranks[0].Microbatches); got != 1 {
		t.Fatalf("microbatches %d, want 1 with packing off", got)
	}
	mb := microbatch.DefaultConfig()
	mb.MaxTokensPerMicrobatch = 4
	if p, err = Prepare(tb, false, mb, 6); err != nil || len(p.Plan.Ranks[0].Microbatches) != 4 { // no two of 3,3,2,4 fit in 4 tokens but nothing exceeds it
		t.Fatalf("cap 4 over lengths 3,3,2,4: %v microbatches, want 4, err %v", len(p.Plan.Ranks[0].Microbatches), err)
	}
	if a := p.Batch.Sequences[0].Advantage; math.Abs(float64(a)-0.5) > 1e-6 {
		t.Fatalf("Dr. GRPO advantage %v, want 0.5", a)
	}
}

func TestPrepareSupportRows(t *testing.T) {
	tb, _ := messages.NewTokenBatch(messages.BatchSpec{Vocab: 98, SupportK: 3})
	tr := traj("a0", "a", 1, 0, 0)
	tr.Support = []int32{-1, -1, -1, 7, 4, -1, 9, -1, -1}
	if err := tb.Append(tr); err != nil {
		t.Fatal(err)
	}
	p, err := Prepare(tb, true, microbatch.DefaultConfig(), 0)
	if err != nil {
		t.Fatal(err)
	}
	rows := p.Batch.Sequences[0].Support
	if rows[0] != nil || len(rows[1]) != 2 || rows[1][0] != 7 || len(rows[2]) != 1 {
		t.Fatalf("support rows %v", rows)
	}
}

func TestPrepareEmpty(t *testing.T) {
	tb, _ := messages.NewTokenBatch(messages.BatchSpec{})
	if _, err := Prepare(tb, true, microbatch.DefaultConfig(), 0); err == nil {
		t.Fatal("empty batch accepted")
	}
}
