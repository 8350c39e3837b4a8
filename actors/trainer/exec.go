package trainer

import (
	"context"
	"fmt"
	"os"

	"github.com/asyncrl/asyncrl/actors/publisher"
	"github.com/asyncrl/asyncrl/actors/trainer/bridge"
	"github.com/asyncrl/asyncrl/model"
)

// Exec is the exec backend (trainer.backend: exec): each step goes to a
// child process over the worker bridge (frames v1, docs/protocol.md), which
// trains and writes the new version's serving checkpoint. Step hands that
// directory to the Publisher: loaded as well (model.LoadServing) when the
// child trains the built-in policy, so every in-memory publisher keeps
// working, or checked by CheckDir for any other architecture (a Hugging
// Face checkpoint: docs/models.md). The bridge's supervisor restarts a
// child that dies or hangs from the last completed step, so a step is
// trained exactly once.
type Exec struct {
	sup  *bridge.Supervisor
	done int64 // steps whose weights Step returned
	// trained holds a step the child finished whose checkpoint did not
	// load; the retry of that step loads it again instead of training.
	trained *bridge.StepResult
	// check verifies a non-built-in serving checkpoint before it is
	// published (ExecOptions.CheckDir).
	check func(dir string) error
	// published are the serving directories Step returned, oldest first:
	// all but the newest two are deleted (ExecOptions.KeepServing).
	published []string
	keep      int
	// ranks are the group's per-rank figures (RankStats).
	ranks rankBook
}

var _ Stepper = (*Exec)(nil)

// ExecOptions are the exec backend's options beyond the bridge's.
type ExecOptions struct {
	// CheckDir verifies a serving checkpoint whose config.json names an
	// architecture other than the built-in policy before Step returns it
	// (e.g. every tensor present with its shape); nil accepts any
	// directory with a config.json model_type.
	CheckDir func(dir string) error
	// KeepServing is how many of the child's newest serving checkpoints
	// Step keeps on disk (the publisher reads the previous version's as a
	// delta base); older ones are deleted. 0 keeps them all.
	KeepServing int
}

// NewExec starts the child (opts.Spec) and initialises it (opts.Init).
func NewExec(ctx context.Context, opts bridge.Options) (*Exec, error) {
	return NewExecWith(ctx, opts, ExecOptions{})
}

// NewExecWith is NewExec with the exec backend's own options.
func NewExecWith(ctx context.Context, opts bridge.Options, eo ExecOptions) (*Exec, error) {
	sup, err := bridge.Start(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("trainer: exec backend: %w", err)
	}
	return &Exec{sup: sup, done: sup.Step(), check: eo.CheckDir, keep: eo.KeepServing}, nil
}

// Version is the number of steps whose weights Step returned.
func (e *Exec) Version() int64 { return e.done }

// State is the resume state directory of the last completed step ("" before
// the first, unless the child was started from one): the child's layout,
// one rank's or a worker group's shards with their manifest.
func (e *Exec) State() string { return e.sup.State() }

// Restarts is how many times a child was replaced; safe to call
// concurrently with Step.
func (e *Exec) Restarts() int { return e.sup.Started() - 1 }

// Step sends p as TrainBatch step Version()+1 and returns the child's
// serving checkpoint of it.
func (e *Exec) Step(ctx context.Context, p Prepared) (model.StepStats, publisher.Weights, error) {
	step := e.done + 1
	res := e.trained
	if res == nil || res.Step != step {
		tb := FrameBatch(p, step)
		if n := e.sup.Ranks(); n > 1 {
			if len(p.Plan.Ranks) != n {
				return model.StepStats{}, publisher.Weights{}, fmt.Errorf("trainer: exec backend: the microbatch plan splits step %d over %d ranks but the group has %d (trainer.exec_ranks sets the microbatcher's DP size)", step, len(p.Plan.Ranks), n)
			}
			tb.MicrobatchRanks = MicrobatchRanks(p)
		}
		r, err := e.sup.Train(ctx, tb)
		if err != nil {
			return model.StepStats{}, publisher.Weights{}, err
		}
		res = &r
		e.ranks.add(r.Ranks)
	}
	w, err := e.weights(res.Checkpoint)
	if err != nil {
		e.trained = res
		return model.StepStats{}, publisher.Weights{}, fmt.Errorf("trainer: exec backend: step %d checkpoint %s: %w", step, res.Checkpoint, err)
	}
	e.trained, e.done = nil, step
	e.prune(res.Checkpoint)
	mt := res.Metrics
	return model.StepStats{Version: step, Loss: mt["loss"], Entropy: mt["entropy"], GradNorm: mt["grad_norm"],
		Mismatch: mt["mismatch"], KL: mt["kl"], Tokens: int(mt["tokens"]), ClipFrac: mt["clip_frac"], ISRatio: mt["is_ratio"],
		MismatchSameVersion: mt["mismatch_same_version"], SameVersionTokens: int(mt["same_version_tokens"])}, w, nil
}

// weights is the serving checkpoint in dir: the built-in policy loaded,
// or another architecture's directory checked.
func (e *Exec) weights(dir string) (publisher.Weights, error) {
	mt, err := model.ReadModelType(dir)
	if err != nil {
		return publisher.Weights{}, err
	}
	if mt == model.ModelType {
		m, err := model.LoadServing(dir)
		if err != nil {
			return publisher.Weights{}, err
		}
		return publisher.Weights{Model: m, Dir: dir}, nil
	}
	if e.check != nil {
		if err := e.check(dir); err != nil {
			return publisher.Weights{}, err
		}
	}
	return publisher.Weights{Dir: dir}, nil
}

// prune deletes the serving checkpoints older than the newest keep.
func (e *Exec) prune(dir string) {
	e.published = append(e.published, dir)
	if e.keep <= 0 {
		return
	}
	for len(e.published) > e.keep {
		_ = os.RemoveAll(e.published[0])
		e.published = e.published[1:]
	}
}

// Close shuts the child down.
func (e *Exec) Close(ctx context.Context) error { return e.sup.Close(ctx) }

// MicrobatchRanks is the rank of each microbatch FrameBatch sends, in its
// order (TrainBatch.microbatch_ranks).
func MicrobatchRanks(p Prepared) []int {
	var out []int
	for r, rk := range p.Plan.Ranks {
		for _, m := range rk.Microbatches {
			if !m.Padding && len(m.Indices) > 0 {
				out = append(out, r)
			}
		}
	}
	return out
}

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
