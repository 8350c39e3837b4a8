package trainer

import (
	"fmt"

	"github.com/asyncrl/asyncrl/actors/trainer/microbatch"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/model"
)

// Prepared is a mini-batch ready for the built-in backend.
type Prepared struct {
	Batch model.Batch
	// Plan is the microbatch plan of the mini-batch (per sequence tokens).
	Plan microbatch.Plan
	// RewardMean is the mean trajectory reward; Staleness the trainer
	// version minus each sequence's oldest model-token version.
	RewardMean                float64
	StalenessMax              int64
	Groups, Trajectories, Tok int
	// Rewards are the trajectories' rewards, in Batch order (the exec
	// backend sends them to the child).
	Rewards []float32
	// RouteLayers and RouteTopK are the routed-experts shape when the
	// token batch carries routes (R3; Sequence.Routes), else 0.
	RouteLayers, RouteTopK int
}

// Prepare turns a packed token batch into training sequences with GRPO
// advantages (per group: (r − mean)/(std + 1e-6) when normStd, else
// r − mean) and plans its microbatches. version is the trainer's current
// policy version, used for the staleness figures.
func Prepare(tb *messages.TokenBatch, normStd bool, mb microbatch.Config, version int64) (Prepared, error) {
	if tb.Len() == 0 {
		return Prepared{}, fmt.Errorf("trainer: empty mini-batch")
	}
	var p Prepared
	scores := make([]float64, tb.Len())
	tokens := make([]int, tb.Len())
	groups := map[string]bool{}
	for i := range tb.Len() {
		t, err := tb.Trajectory(i)
		if err != nil {
			return Prepared{}, fmt.Errorf("trainer: %w", err)
		}
		seq := model.Sequence{Tokens: t.TokenIDs, LossMask: t.LossMask, RolloutLogprobs: t.Logprobs,
			Version: make([]int64, len(t.PolicyVersions)), Group: t.GroupID}
		oldest := int64(-1)
		for j, v := range t.PolicyVersions {
			seq.Version[j] = int64(v)
			if t.LossMask[j] == 1 && (oldest < 0 || int64(v) < oldest) {
				oldest = int64(v)
			}
		}
		if oldest >= 0 {
			p.StalenessMax = max(p.StalenessMax, version-oldest)
		}
		if t.Support != nil {
			seq.Support = supportRows(t.Support, t.LossMask, len(t.Support)/max(len(t.TokenIDs), 1))
		}
		if t.Routes != nil { // R3: replay the engine's experts
			seq.Routes = t.Routes
			p.RouteLayers, p.RouteTopK = int(tb.Routes.Layers), int(tb.Routes.TopK)
		}
		p.Batch.Sequences = append(p.Batch.Sequences, seq)
		scores[i] = float64(t.Reward)
		p.Rewards = append(p.Rewards, t.Reward)
		tokens[i] = len(t.TokenIDs)
		p.RewardMean += float64(t.Reward)
		p.Tok += len(t.TokenIDs)
		groups[t.GroupID] = true
	}
	adv := model.Advantages(scores, tb.GroupIDs, normStd)
	for i := range p.Batch.Sequences {
		p.Batch.Sequences[i].Advantage = float32(adv[i])
	}
	plan, err := microbatch.Build(tokens, mb)
	if err != nil {
		return Prepared{}, fmt.Errorf("trainer: microbatches: %w", err)
	}
	p.Plan = plan
	p.RewardMean /= float64(tb.Len())
	p.Groups, p.Trajectories = len(groups), tb.Len()
	return p, nil
}

// supportRows unpacks a flat [len, k] support column: rows of context
// tokens are nil (full vocabulary, never trained), −1 padding is dropped.
func supportRows(flat []int32, mask []uint8, k int) [][]int32 {
	rows := make([][]int32, len(mask))
	for i := range mask {
		if mask[i] == 0 || k == 0 {
			continue
		}
		for _, id := range flat[i*k : (i+1)*k] {
			if id >= 0 {
				rows[i] = append(rows[i], id)
			}
		}
	}
	return rows
}
