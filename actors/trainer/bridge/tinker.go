package bridge

import (
	"context"
	"errors"
	"fmt"
)

// Frames of Tinker's split training calls (optional frames of v1, added
// for the Tinker server's exec backend, tinker/bridgetrain): ForwardBackward
// adds a loss's gradient to the child's accumulator, OptimStep applies it
// with the call's AdamW parameters. A child that does not know them answers
// Error{bad_field, field: "type"}, so nothing is silently dropped.
const (
	TypeForwardBackward       = "ForwardBackward"
	TypeForwardBackwardResult = "ForwardBackwardResult"
	TypeOptimStep             = "OptimStep"
	TypeOptimStepResult       = "OptimStepResult"
)

// ForwardBackward is one Tinker forward_backward (or forward, with
// Backward false) call over S data. Arrays (T tokens in all):
// tokens int32 [T] and seq_offsets int64 [S+1] as TrainBatch carries them;
// target_tokens int32 [T] (position i's target is predicted from the
// datum's tokens up to and including i); weights, logprobs, advantages
// float32 [T] as the loss needs them (cross_entropy: weights, absent = 1;
// importance_sampling, ppo, cispo: logprobs and advantages).
type ForwardBackward struct {
	Header
	// Loss is cross_entropy | importance_sampling | ppo | cispo.
	Loss string `cbor:"loss"`
	// LossConfig holds clip_low_threshold / clip_high_threshold (ppo,
	// cispo; defaults 0.8 and 1.2).
	LossConfig map[string]float64 `cbor:"loss_config,omitempty"`
	Backward   bool               `cbor:"backward"`
	Arrays     map[string]Tensor  `cbor:"arrays"`
}

// OptimStep applies the accumulated gradient with AdamW and clears it.
// GradClipNorm 0 means no clipping.
type OptimStep struct {
	Header
	LR           float64 `cbor:"lr"`
	Beta1        float64 `cbor:"beta1"`
	Beta2        float64 `cbor:"beta2"`
	Eps          float64 `cbor:"eps"`
	WeightDecay  float64 `cbor:"weight_decay"`
	GradClipNorm float64 `cbor:"grad_clip_norm"`
}

// FwdBwdResult is a ForwardBackwardResult as the Go side keeps it.
type FwdBwdResult struct {
	// Loss is the summed loss of the call.
	Loss float64
	// Logprobs and ElementwiseLoss are [T], in the request's token order.
	Logprobs, ElementwiseLoss []float32
	Metrics                   map[string]float64
}

// ErrChildLost: the child died or broke the protocol during a Tinker call;
// its accumulated gradient and any steps since the last Reinit are gone.
var ErrChildLost = errors.New("bridge: trainer child lost its state")

// call sends one request without replay: Tinker's calls change state that a
// restarted child does not have (the gradient accumulator), so a failure
// other than a *ChildError drops the child and returns ErrChildLost.
func (s *Supervisor) call(ctx context.Context, typ string, req frame, want string) (Reply, error) {
	if s.child == nil {
		return Reply{}, fmt.Errorf("%w: no child (reload a state)", ErrChildLost)
	}
	rep, err := s.child.Call(ctx, typ, req, want, s.opts.StepTimeout)
	if err != nil {
		var ce *ChildError
		if errors.As(err, &ce) {
			return Reply{}, err
		}
		s.drop()
		return Reply{}, fmt.Errorf("%w: %s: %w", ErrChildLost, typ, err)
	}
	return rep, nil
}

// ForwardBackward runs fb in the child.
func (s *Supervisor) ForwardBackward(ctx context.Context, fb *ForwardBackward) (FwdBwdResult, error) {
	rep, err := s.call(ctx, TypeForwardBackward, fb, TypeForwardBackwardResult)
	if err != nil {
		return FwdBwdResult{}, err
	}
	lp, ok := rep.Arrays["logprobs"]
	el, ok2 := rep.Arrays["elementwise_loss"]
	if !ok || !ok2 {
		return FwdBwdResult{}, fmt.Errorf("%w: ForwardBackwardResult without logprobs or elementwise_loss", ErrProtocol)
	}
	n := -1
	if t, ok := fb.Arrays["tokens"]; ok && len(t.Shape) == 1 {
		n = int(t.Shape[0])
	}
	if err := lp.Check(Float32, n); err != nil {
		return FwdBwdResult{}, fmt.Errorf("%w: ForwardBackwardResult logprobs: %v", ErrProtocol, err)
	}
	if err := el.Check(Float32, n); err != nil {
		return FwdBwdResult{}, fmt.Errorf("%w: ForwardBackwardResult elementwise_loss: %v", ErrProtocol, err)
	}
	return FwdBwdResult{Loss: rep.Loss, Logprobs: lp.Float32s(), ElementwiseLoss: el.Float32s(), Metrics: numbers(rep.Metrics)}, nil
}

// OptimStep applies the accumulated gradient; it returns the child's metrics
// and its optimiser step count.
func (s *Supervisor) OptimStep(ctx context.Context, p *OptimStep) (map[string]float64, int64, error) {
	rep, err := s.call(ctx, TypeOptimStep, p, TypeOptimStepResult)
	if err != nil {
		return nil, 0, err
	}
	return numbers(rep.Metrics), rep.Step, nil
}

// SaveServing asks the child for a serving checkpoint (BF16, the layout
// StepResult.checkpoint has) in dir: SaveCheckpoint with serving true.
func (s *Supervisor) SaveServing(ctx context.Context, dir string) error {
	if s.child == nil {
		return fmt.Errorf("%w: no child (reload a state)", ErrChildLost)
	}
	_, err := s.call(ctx, TypeSaveCheckpoint, &SaveCheckpoint{Dir: dir, Serving: true}, TypeSaved)
	return err
}

// Reinit replaces the child by a fresh one initialised with init (its
// Resume and Step say where it starts), e.g. to load a saved state.
func (s *Supervisor) Reinit(ctx context.Context, init Init) error {
	s.drop()
	s.opts.Init = init
	s.step, s.state = init.Step, ""
	if init.Resume != nil {
		s.state = *init.Resume
	}
	return s.ensure(ctx, "reinit")
}

func numbers(m map[string]any) map[string]float64 {
	out := make(map[string]float64, len(m))
	for k, v := range m {
		if f, ok := number(v); ok {
			out[k] = f
		}
	}
	return out
}

// SaveState asks the child for its full resume state in dir (SaveCheckpoint)
// without replay or restart, and returns the step it is at.
func (s *Supervisor) SaveState(ctx context.Context, dir string) (int64, error) {
	rep, err := s.call(ctx, TypeSaveCheckpoint, &SaveCheckpoint{Dir: dir}, TypeSaved)
	if err != nil {
		return 0, err
	}
	return rep.Step, nil
}
