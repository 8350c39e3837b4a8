package trainer

import (
	"context"
	"fmt"

	"github.com/asyncrl/asyncrl/actors/trainer/bridge"
	"github.com/asyncrl/asyncrl/policy"
)

// Exec is the exec backend (trainer.backend: exec): each step goes to a
// child process over the worker bridge (frames v1, docs/protocol.md), which
// trains and writes the new version's serving checkpoint; Step loads it
// (policy.LoadServing: the child trains the built-in policy's layout) so
// every existing Publisher keeps working. The bridge's supervisor restarts
// a child that dies or hangs from the last completed step, so a step is
// trained exactly once.
type Exec struct {
	sup  *bridge.Supervisor
	done int64 // steps whose weights Step returned
	// trained holds a step the child finished whose checkpoint did not
	// load; the retry of that step loads it again instead of training.
	trained *bridge.StepResult
}

var _ Stepper = (*Exec)(nil)

// NewExec starts the child (opts.Spec) and initialises it (opts.Init).
func NewExec(ctx context.Context, opts bridge.Options) (*Exec, error) {
	sup, err := bridge.Start(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("trainer: exec backend: %w", err)
	}
	return &Exec{sup: sup, done: sup.Step()}, nil
}

// Version is the number of steps whose weights Step returned.
func (e *Exec) Version() int64 { return e.done }

// Restarts is how many times a child was replaced; safe to call
// concurrently with Step.
func (e *Exec) Restarts() int { return e.sup.Started() - 1 }

// Step sends p as TrainBatch step Version()+1 and loads the result.
func (e *Exec) Step(ctx context.Context, p Prepared) (policy.StepStats, *policy.Model, error) {
	step := e.done + 1
	res := e.trained
	if res == nil || res.Step != step {
		r, err := e.sup.Train(ctx, FrameBatch(p, step))
		if err != nil {
			return policy.StepStats{}, nil, err
		}
		res = &r
	}
	m, err := policy.LoadServing(res.Checkpoint)
	if err != nil {
		e.trained = res
		return policy.StepStats{}, nil, fmt.Errorf("trainer: exec backend: step %d checkpoint %s: %w", step, res.Checkpoint, err)
	}
	e.trained, e.done = nil, step
	mt := res.Metrics
	return policy.StepStats{Version: step, Loss: mt["loss"], Entropy: mt["entropy"], GradNorm: mt["grad_norm"],
		Mismatch: mt["mismatch"], KL: mt["kl"], Tokens: int(mt["tokens"]), ClipFrac: mt["clip_frac"], ISRatio: mt["is_ratio"],
		MismatchSameVersion: mt["mismatch_same_version"], SameVersionTokens: int(mt["same_version_tokens"])}, m, nil
}

// Close shuts the child down.
func (e *Exec) Close(ctx context.Context) error { return e.sup.Close(ctx) }

// FrameBatch is p as the bridge's TrainBatch of step: the sequences
// concatenated (tokens, seq_offsets, loss_mask, rollout_logprobs, versions
// with −1 for tokens outside the loss mask), the Go GRPO advantages, the
// rewards, the group ids and the microbatch plan (every rank's non-padding
// microbatches in rank order: padding adds nothing to the gradient).
func FrameBatch(p Prepared, step int64) *bridge.TrainBatch {
	seqs := p.Batch.Sequences
	var n int
	for _, s := range seqs {
		n += len(s.Tokens)
	}
	tok := make([]int32, 0, n)
	mask := make([]uint8, 0, n)
	lp := make([]float32, 0, n)
	ver := make([]int64, 0, n)
	off := make([]int64, 0, len(seqs)+1)
	adv := make([]float32, len(seqs))
	groups := make([]string, len(seqs))
	for i, s := range seqs {
		off = append(off, int64(len(tok)))
		tok = append(tok, s.Tokens...)
		mask = append(mask, s.LossMask...)
		lp = append(lp, s.RolloutLogprobs...)
		for j := range s.Tokens {
			v := int64(-1)
			if s.LossMask[j] != 0 && j < len(s.Version) {
				v = s.Version[j]
			}
			ver = append(ver, v)
		}
		adv[i], groups[i] = s.Advantage, s.Group
	}
	off = append(off, int64(len(tok)))
	rewards := p.Rewards
	if len(rewards) != len(seqs) {
		rewards = make([]float32, len(seqs))
	}
	var micro [][]int
	for _, r := range p.Plan.Ranks {
		for _, m := range r.Microbatches {
			if !m.Padding && len(m.Indices) > 0 {
				micro = append(micro, m.Indices)
			}
		}
	}
	arrays := map[string]bridge.Tensor{
		"tokens": bridge.Int32Tensor(tok), "seq_offsets": bridge.Int64Tensor(off),
		"loss_mask": bridge.Uint8Tensor(mask), "rollout_logprobs": bridge.Float32Tensor(lp),
		"versions": bridge.Int64Tensor(ver), "advantages": bridge.Float32Tensor(adv),
		"rewards": bridge.Float32Tensor(rewards),
	}
	if r, ok := bridge.RoutesTensor(seqs, p.RouteLayers, p.RouteTopK); ok {
		arrays["routes"] = r
	}
	if s, ok := bridge.SupportTensor(seqs); ok {
		arrays["support"] = s
	}
	return &bridge.TrainBatch{Step: step, Arrays: arrays, Groups: groups, Microbatches: micro}
}
