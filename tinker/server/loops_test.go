package server_test

import (
	"math/rand/v2"
	"testing"

	"github.com/asyncrl/asyncrl/model/tokenizer"
	"github.com/asyncrl/asyncrl/tasks"
	"github.com/asyncrl/asyncrl/tinker"
	"github.com/asyncrl/asyncrl/tinker/client"
)

func datum(input []int32, inputs map[string][]float64) tinker.Datum {
	d := tinker.Datum{ModelInput: tinker.ModelInput{Chunks: []tinker.Chunk{{Type: "encoded_text", Tokens: input}}},
		LossFnInputs: map[string]tinker.TensorData{}}
	for k, v := range inputs {
		dt := "float32"
		if k == "target_tokens" {
			dt = "int64"
		}
		d.LossFnInputs[k] = tinker.TensorData{Data: v, DType: dt, Shape: []int{len(v)}}
	}
	return d
}

// sftDatum is next-token prediction on prompt+answer, trained on the
// answer only.
func sftDatum(prompt, answer string) tinker.Datum {
	p := append([]int32{tokenizer.BOS}, tokenizer.Encode(prompt)...)
	return tinker.NextTokenDatum(append(append(p, tokenizer.Encode(answer)...), tokenizer.EOS), len(p)-1)
}

// TestSLLoopLowersLoss: forward_backward(cross_entropy) + optim_step over a
// small dataset through the HTTP API lowers the loss that forward reports.
func TestSLLoopLowersLoss(t *testing.T) {
	_, c := start(t, testConfig(t.TempDir()), "")
	ctx := ctxT(t)
	_, model := newModel(t, ctx, c, 8)
	in := tinker.ForwardBackwardInput{LossFn: "cross_entropy"}
	for _, q := range [][2]string{{"rev abc=", "cba"}, {"rev de=", "ed"}, {"rev bad=", "dab"}, {"rev ace=", "eca"}} {
		in.Data = append(in.Data, sftDatum(q[0], q[1]))
	}
	seq := int64(1)
	first, err := c.Forward(ctx, model, seq, in)
	if err != nil {
		t.Fatal(err)
	}
	seq++
	p := tinker.DefaultAdamParams()
	p.LearningRate = 1e-2
	for range 12 {
		if _, err := c.ForwardBackward(ctx, model, seq, in); err != nil {
			t.Fatal(err)
		}
		if _, err := c.OptimStep(ctx, model, seq+1, p); err != nil {
			t.Fatal(err)
		}
		seq += 2
	}
	last, err := c.Forward(ctx, model, seq, in)
	if err != nil {
		t.Fatal(err)
	}
	a, b := first.Metrics["loss:sum"], last.Metrics["loss:sum"]
	t.Logf("loss:sum %.3f → %.3f", a, b)
	if !(b < 0.5*a) {
		t.Fatalf("loss %.3f → %.3f: not halved", a, b)
	}
	if len(last.LossFnOutputs) != len(in.Data) || len(last.LossFnOutputs[0]["logprobs"].Data) != len(in.Data[0].ModelInput.Chunks[0].Tokens) {
		t.Fatalf("loss_fn_outputs do not match the data: %d outputs", len(last.LossFnOutputs))
	}
}

// TestRLLoopRaisesReward: asample from the model's latest sampler weights
// → reward from the built-in reverse task → forward_backward with
// importance_sampling (advantages = reward − group mean) → optim_step →
// save_weights_for_sampler (a new sampling session the engine loads) raises
// the mean reward.
func TestRLLoopRaisesReward(t *testing.T) {
	_, c := start(t, testConfig(t.TempDir()), "")
	ctx := ctxT(t)
	task, err := tasks.Get("reverse")
	if err != nil {
		t.Fatal(err)
	}
	_, model := newModel(t, ctx, c, 8)
	rng := rand.New(rand.NewPCG(1, 2))
	seq := int64(1)
	_, sampler, err := c.SaveForSampler(ctx, model, seq, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	const iters, groups, n = 24, 8, 8
	var rewards []float64
	p := tinker.DefaultAdamParams()
	p.LearningRate = 3e-3
	for it := range iters {
		in := tinker.ForwardBackwardInput{LossFn: "importance_sampling"}
		var sum float64
		type ep struct {
			prompt []int32
			seq    tinker.SampledSequence
			r      float64
		}
		var eps []ep
		var tokens int
		for g := range groups {
			pr := task.Sample(rng)
			env := task.NewEnv()
			obs, err := env.Reset(pr)
			if err != nil {
				t.Fatal(err)
			}
			prompt := append([]int32{tokenizer.BOS}, tokenizer.Encode(obs)...)
			out, err := c.Sample(ctx, client.SampleRequest(sampler, int64(it*groups+g), prompt, n, task.MaxTokensPerTurn(), 1))
			if err != nil {
				t.Fatal(err)
			}
			var gsum float64
			start := len(eps)
			for _, s := range out.Sequences {
				env := task.NewEnv()
				if _, err := env.Reset(pr); err != nil {
					t.Fatal(err)
				}
				_, r, _, err := env.Step(tokenizer.Decode(s.Tokens))
				if err != nil {
					t.Fatal(err)
				}
				eps = append(eps, ep{prompt, s, r})
				gsum += r
				tokens += len(s.Tokens)
			}
			for i := start; i < len(eps); i++ {
				eps[i].r -= gsum / float64(len(out.Sequences))
			}
			sum += gsum
		}
		rewards = append(rewards, sum/float64(groups*n))
		for _, e := range eps {
			full := append(append([]int32(nil), e.prompt...), e.seq.Tokens...)
			m := len(full) - 1
			tg, lp, adv := make([]float64, m), make([]float64, m), make([]float64, m)
			for i := range m {
				tg[i] = float64(full[i+1])
				if k := i + 1 - len(e.prompt); k >= 0 {
					lp[i] = float64(e.seq.Logprobs[k])
					adv[i] = e.r / float64(tokens)
				}
			}
			in.Data = append(in.Data, datum(full[:m], map[string][]float64{"target_tokens": tg, "logprobs": lp, "advantages": adv}))
		}
		seq++
		if _, err := c.ForwardBackward(ctx, model, seq, in); err != nil {
			t.Fatal(err)
		}
		seq++
		if _, err := c.OptimStep(ctx, model, seq, p); err != nil {
			t.Fatal(err)
		}
		seq++
		if _, sampler, err = c.SaveForSampler(ctx, model, seq, "", int64(it+1)); err != nil {
			t.Fatal(err)
		}
	}
	first := (rewards[0] + rewards[1] + rewards[2]) / 3
	last := (rewards[iters-1] + rewards[iters-2] + rewards[iters-3]) / 3
	t.Logf("mean reward per iteration: %.3f", rewards)
	if !(last > first+0.05) {
		t.Fatalf("reward did not rise: first 3 iterations %.3f, last 3 %.3f", first, last)
	}
}
