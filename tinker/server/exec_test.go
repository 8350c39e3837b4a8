package server_test

import (
	"testing"

	"github.com/asyncrl/asyncrl/tinker"
	"github.com/asyncrl/asyncrl/tinker/client"
)

// TestExecTrainerTrainsThroughTorch: with tinker.trainer exec the SDK's
// calls train a model in the PyTorch worker: forward_backward + optim_step
// lower the loss, save_weights / load_weights (with the optimiser) restore
// it exactly, and a sampler checkpoint the child writes serves samples on
// the built-in engine. Skipped when /usr/bin/python3 cannot import torch.
func TestExecTrainerTrainsThroughTorch(t *testing.T) {
	cfg := torchConfig(t)
	_, c := start(t, cfg, "")
	ctx := ctxT(t)
	_, model := newModel(t, ctx, c, 8)
	in := tinker.ForwardBackwardInput{LossFn: "cross_entropy"}
	for _, q := range [][2]string{{"rev abc=", "cba"}, {"rev de=", "ed"}} {
		in.Data = append(in.Data, sftDatum(q[0], q[1]))
	}
	p := tinker.DefaultAdamParams()
	p.LearningRate = 1e-2
	seq := int64(1)
	var losses []float64
	for range 4 {
		out, err := c.ForwardBackward(ctx, model, seq, in)
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, out.Metrics["loss:sum"])
		if _, err := c.OptimStep(ctx, model, seq+1, p); err != nil {
			t.Fatal(err)
		}
		seq += 2
	}
	if !(losses[3] < losses[0]) {
		t.Fatalf("loss did not fall: %v", losses)
	}
	path, err := c.SaveWeights(ctx, model, seq, "s1")
	if err != nil {
		t.Fatal(err)
	}
	seq++
	saved, err := c.Forward(ctx, model, seq, in)
	if err != nil {
		t.Fatal(err)
	}
	seq++
	if _, err := c.ForwardBackward(ctx, model, seq, in); err != nil {
		t.Fatal(err)
	}
	if _, err := c.OptimStep(ctx, model, seq+1, p); err != nil {
		t.Fatal(err)
	}
	seq += 2
	if err := c.LoadWeights(ctx, model, seq, path, true); err != nil {
		t.Fatal(err)
	}
	seq++
	back, err := c.Forward(ctx, model, seq, in)
	if err != nil {
		t.Fatal(err)
	}
	seq++
	if a, b := saved.Metrics["loss:sum"], back.Metrics["loss:sum"]; a != b {
		t.Fatalf("loss after load_weights %v, at save %v", b, a)
	}
	_, sampler, err := c.SaveForSampler(ctx, model, seq, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.Sample(ctx, client.SampleRequest(sampler, 1, sftDatum("rev abc=", "cba").ModelInput.Tokens(), 2, 8, 1))
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Sequences) != 2 {
		t.Fatalf("%d sequences, want 2", len(out.Sequences))
	}
	if err := c.UnloadModel(ctx, model); err != nil {
		t.Fatal(err)
	}
}
