package gotrain

import (
	"math"
	"os"
	"testing"

	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/model/tokenizer"
	"github.com/asyncrl/asyncrl/tinker"
)

func base(t *testing.T) *model.Model {
	t.Helper()
	m, err := model.New(model.DefaultConfig(), 3)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// sft builds next-token datums for text: input tokens[:-1], targets [1:].
func sft(texts ...string) *tinker.ForwardBackwardInput {
	in := &tinker.ForwardBackwardInput{LossFn: "cross_entropy"}
	for _, s := range texts {
		in.Data = append(in.Data, tinker.NextTokenDatum(append([]int32{tokenizer.BOS}, tokenizer.Encode(s)...), 0))
	}
	return in
}

// TestCrossEntropyLoopLowersLoss: forward_backward + optim_step repeated on
// a small dataset lowers the summed loss, and forward alone changes nothing.
func TestCrossEntropyLoopLowersLoss(t *testing.T) {
	m := New(base(t))
	in := sft("abcabc", "hello", "12+3=15")
	first, err := m.ForwardBackward(in, false)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := m.ForwardBackward(in, false)
	if again.Metrics["loss:sum"] != first.Metrics["loss:sum"] {
		t.Fatal("forward changed the model")
	}
	p := tinker.DefaultAdamParams()
	p.LearningRate = 1e-2
	for range 15 {
		if _, err := m.ForwardBackward(in, true); err != nil {
			t.Fatal(err)
		}
		if _, err := m.OptimStep(p); err != nil {
			t.Fatal(err)
		}
	}
	last, _ := m.ForwardBackward(in, false)
	if !(last.Metrics["loss:sum"] < 0.7*first.Metrics["loss:sum"]) {
		t.Fatalf("loss %v → %v: not lowered by 30%%", first.Metrics["loss:sum"], last.Metrics["loss:sum"])
	}
	// logprobs agree with the loss: cross_entropy with weight 1 is −Σ logp.
	var s float64
	for _, o := range last.LossFnOutputs {
		for _, v := range o["logprobs"].Data {
			s -= v
		}
	}
	if math.Abs(s-last.Metrics["loss:sum"]) > 1e-6*math.Abs(s) {
		t.Fatalf("−Σ logprobs %v ≠ loss %v", s, last.Metrics["loss:sum"])
	}
}

// TestEachLossDescends: for each loss, one small step against its
// accumulated gradient lowers that loss (a wrong sign or a dropped term in
// a loss's derivative fails it).
func TestEachLossDescends(t *testing.T) {
	for _, loss := range []string{"cross_entropy", "importance_sampling", "ppo", "cispo"} {
		t.Run(loss, func(t *testing.T) {
			m := New(base(t))
			in := sft("abcd", "xyz")
			fw, _ := m.ForwardBackward(in, false)
			in.LossFn = loss
			for di := range in.Data {
				d := &in.Data[di]
				n := len(d.LossFnInputs["target_tokens"].Data)
				q := make([]float64, n)
				a := make([]float64, n)
				for i := range q {
					q[i] = fw.LossFnOutputs[di]["logprobs"].Data[i] - 0.05 // ratio ≈ 1.05: inside the clip
					a[i] = 1 - 2*float64(i%2)
				}
				if loss != "cross_entropy" {
					delete(d.LossFnInputs, "weights")
					d.LossFnInputs["logprobs"] = tinker.TensorData{Data: q, DType: "float32"}
					d.LossFnInputs["advantages"] = tinker.TensorData{Data: a, DType: "float32"}
				}
			}
			before, err := m.ForwardBackward(in, true)
			if err != nil {
				t.Fatal(err)
			}
			p := tinker.AdamParams{LearningRate: 1e-4, Beta1: 0, Beta2: 0, Eps: 1e-30}
			if _, err := m.OptimStep(p); err != nil {
				t.Fatal(err)
			}
			after, _ := m.ForwardBackward(in, false)
			if loss == "cispo" {
				// cispo's weight clip(r) is stop-gradient: the surrogate
				// −Σ c·A·logp with c frozen at its value before the step
				// must fall (the reported loss re-evaluates c).
				sur := func(out tinker.ForwardBackwardOutput) (s float64) {
					for di, o := range out.LossFnOutputs {
						for i, lp := range o["logprobs"].Data {
							in0 := in.Data[di].LossFnInputs
							c := min(max(math.Exp(before.LossFnOutputs[di]["logprobs"].Data[i]-in0["logprobs"].Data[i]), 0.8), 1.2)
							s -= c * in0["advantages"].Data[i] * lp
						}
					}
					return s
				}
				before.Metrics["loss:sum"], after.Metrics["loss:sum"] = sur(before), sur(after)
			}
			if !(after.Metrics["loss:sum"] < before.Metrics["loss:sum"]) {
				t.Fatalf("a step against the gradient did not lower %s: %v → %v", loss, before.Metrics["loss:sum"], after.Metrics["loss:sum"])
			}
		})
	}
}

// TestSaveLoadStateRoundTrip: weights and Adam state survive SaveState and
// LoadState exactly (the next step from the loaded state equals the next
// step from the original); a corrupted state file is refused.
func TestSaveLoadStateRoundTrip(t *testing.T) {
	a := New(base(t))
	in := sft("abcabc")
	p := tinker.DefaultAdamParams()
	p.LearningRate = 1e-2
	for range 2 {
		a.ForwardBackward(in, true)
		a.OptimStep(p)
	}
	dir := t.TempDir()
	if err := a.SaveState(dir); err != nil {
		t.Fatal(err)
	}
	b := New(base(t))
	if err := b.LoadState(dir, true); err != nil {
		t.Fatal(err)
	}
	for _, m := range []*Model{a, b} {
		m.ForwardBackward(in, true)
		m.OptimStep(p)
	}
	la, _ := a.ForwardBackward(in, false)
	lb, _ := b.ForwardBackward(in, false)
	if la.Metrics["loss:sum"] != lb.Metrics["loss:sum"] {
		t.Fatalf("loaded model diverged: %v vs %v", la.Metrics["loss:sum"], lb.Metrics["loss:sum"])
	}
	corrupt(t, dir)
	if err := b.LoadState(dir, true); err == nil {
		t.Fatal("corrupt state loaded")
	}
}

func corrupt(t *testing.T, dir string) {
	t.Helper()
	path := dir + "/state.bin"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[10] ^= 0xff
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
