package bridge

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
)

// TestChildWithoutTinkerFramesAnswersTypedErrors: the Go child does not
// implement ForwardBackward, OptimStep or SaveCheckpoint.serving (optional
// v1 frames and field); it answers Error{bad_field} naming what it does
// not know, and keeps serving (docs/protocol.md's compatibility rule).
func TestChildWithoutTinkerFramesAnswersTypedErrors(t *testing.T) {
	h := newHarness(t)
	s, _ := h.run(t, 0)
	ctx := context.Background()
	var ce *ChildError
	_, err := s.ForwardBackward(ctx, &ForwardBackward{Loss: "cross_entropy", Arrays: map[string]Tensor{
		"tokens": Int32Tensor([]int32{1, 2}), "seq_offsets": Int64Tensor([]int64{0, 2}), "target_tokens": Int32Tensor([]int32{2, 3})}})
	if !errors.As(err, &ce) || ce.Code != CodeBadField || ce.Field != "type" {
		t.Fatalf("ForwardBackward to the Go child: %v, want bad_field type", err)
	}
	if _, _, err := s.OptimStep(ctx, &OptimStep{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8}); !errors.As(err, &ce) || ce.Field != "type" {
		t.Fatalf("OptimStep to the Go child: %v, want bad_field type", err)
	}
	if err := s.SaveServing(ctx, filepath.Join(h.dir, "sampler")); !errors.As(err, &ce) || ce.Field != "serving" {
		t.Fatalf("SaveCheckpoint serving to the Go child: %v, want bad_field serving", err)
	}
	if _, err := s.Train(ctx, batch(1)); err != nil || s.Started() != 1 {
		t.Fatalf("step 1 after the refusals: %v, children %d", err, s.Started())
	}
}
