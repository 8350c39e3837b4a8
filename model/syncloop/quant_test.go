package syncloop

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/model"
)

// quantConfig is a loop serving serve with the trainer faking fake.
func quantConfig(serve, fake model.Quant, seed uint64) Config {
	cfg := DefaultConfig()
	cfg.Serve = serve
	cfg.Trainer.FakeQuant = string(fake)
	cfg.Seed = seed
	cfg.MeasureRatio = true
	return cfg
}

// TestQuantServeMismatch: in the synchronous loop every token comes from
// the version being trained, so the mismatch is the serving precision's
// alone. INT4 serving against a dense trainer is far above BF16 serving;
// with the trainer faking the same INT4 it falls to float32 rounding,
// below even BF16 serving, and the importance ratios stay at 1. Holds by
// construction (the trainer's quantiser is the engine's); BENCHMARKS.md
// has the longer run.
func TestQuantServeMismatch(t *testing.T) {
	res := map[string]StepResult{}
	for _, c := range []struct{ serve, fake model.Quant }{
		{model.QuantNone, ""}, {model.QuantINT4G32, ""}, {model.QuantINT4G32, model.QuantINT4G32},
	} {
		cfg := quantConfig(c.serve, c.fake, 3)
		cfg.Groups, cfg.Samples = 4, 4
		rs := run(t, "sort", cfg, 3)
		last := rs[len(rs)-1]
		res[string(c.serve)+"/"+string(c.fake)] = last
		t.Logf("serve %s, fake quant %q: mismatch %.3g, ratio deviation %.3g", c.serve, c.fake, last.Stats.Mismatch, last.RatioDev)
	}
	bf16, int4, fq := res["none/"], res["int4_g32/"], res["int4_g32/int4_g32"]
	if !(int4.Stats.Mismatch > 10*bf16.Stats.Mismatch) || !(int4.RatioDev > 10*bf16.RatioDev) {
		t.Errorf("INT4 serving mismatch %.3g (ratio dev %.3g) not ≫ BF16 serving's %.3g (%.3g)",
			int4.Stats.Mismatch, int4.RatioDev, bf16.Stats.Mismatch, bf16.RatioDev)
	}
	if !(fq.Stats.Mismatch < 1e-6) || !(fq.RatioDev < 1e-6) || fq.Stats.Mismatch > bf16.Stats.Mismatch {
		t.Errorf("INT4 serving with fake quantisation: mismatch %.3g, ratio dev %.3g; want float32 rounding (< BF16's %.3g)",
			fq.Stats.Mismatch, fq.RatioDev, bf16.Stats.Mismatch)
	}
	if _, err := New(nil, quantConfig("int3", "", 1)); err == nil || !strings.Contains(err.Error(), "Serve") {
		t.Errorf("Serve int3: %v", err)
	}
}

// TestQuantMismatchTable prints BENCHMARKS.md's "Train–inference mismatch
// under quantised serving" table: ASYNCRL_QUANT_TABLE=1 go test
// ./model/syncloop -run TestQuantMismatchTable -v (a few minutes on 2
// cores). Per run: the means over its steps of the mismatch mean
// |logp_trainer − logp_rollout|, the mean |ratio − 1| and |mean ratio − 1|,
// and the mean reward of its last 10 steps; medians over 3 seeds.
func TestQuantMismatchTable(t *testing.T) {
	if os.Getenv("ASYNCRL_QUANT_TABLE") == "" {
		t.Skip("set ASYNCRL_QUANT_TABLE=1 to measure")
	}
	const steps = 60
	seeds := []uint64{1, 2, 3}
	rows := []struct{ serve, fake model.Quant }{
		{model.QuantNone, ""}, {model.QuantFP8, ""}, {model.QuantMXFP8, ""},
		{model.QuantINT4G128, ""}, {model.QuantINT4G128, model.QuantINT4G128},
		{model.QuantINT4G32, ""}, {model.QuantINT4G32, model.QuantINT4G32},
	}
	median := func(xs []float64) float64 { slices.Sort(xs); return xs[len(xs)/2] }
	var out strings.Builder
	fmt.Fprintf(&out, "| serving | trainer | mean |Δlogprob| | mean |ratio−1| | |mean ratio−1| | reward (last 10 of %d steps) |\n|---|---|---|---|---|---|\n", steps)
	for _, r := range rows {
		var mm, dev, isr, rew []float64
		for _, seed := range seeds {
			rs := run(t, "sort", quantConfig(r.serve, r.fake, seed), steps)
			var a, b, c, d float64
			for _, x := range rs {
				a += x.Stats.Mismatch
				b += x.RatioDev
				c += abs(x.Stats.ISRatio - 1)
			}
			for _, x := range rs[steps-10:] {
				d += x.MeanReward
			}
			mm, dev, isr, rew = append(mm, a/steps), append(dev, b/steps), append(isr, c/steps), append(rew, d/10)
		}
		fake := "dense (FP32)"
		if r.fake != "" {
			fake = "fake quant " + string(r.fake)
		}
		serve := string(r.serve)
		if r.serve == model.QuantNone {
			serve = "BF16"
		}
		fmt.Fprintf(&out, "| %s | %s | %.3g | %.3g | %.3g | %.3f |\n", serve, fake, median(mm), median(dev), median(isr), median(rew))
	}
	t.Log("\n" + out.String())
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
