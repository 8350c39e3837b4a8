package sampler

import (
	"math"
	"slices"
	"sort"
	"testing"

	"pgregory.net/rapid"
)

// naiveSupport is a direct transcription of the documented semantics:
// softmax at T, min-p, then top-k, then top-p over the renormalised
// survivors, in descending probability with ties by id.
func naiveSupport(logits []float32, p Params) []int32 {
	T := p.Temperature
	if T == 0 {
		T = 1
	}
	type c struct {
		id int32
		p  float64
	}
	var cs []c
	maxL := math.Inf(-1)
	for _, l := range logits {
		maxL = math.Max(maxL, float64(l))
	}
	for i, l := range logits {
		cs = append(cs, c{int32(i), math.Exp((float64(l) - maxL) / T)})
	}
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].p > cs[j].p })
	if p.MinP > 0 {
		thr := p.MinP * cs[0].p
		var keep []c
		for i, x := range cs {
			if i == 0 || x.p >= thr {
				keep = append(keep, x)
			}
		}
		cs = keep
	}
	if p.TopK > 0 && p.TopK < len(cs) {
		cs = cs[:p.TopK]
	}
	if p.TopP < 1 {
		var mass float64
		for _, x := range cs {
			mass += x.p
		}
		var keep []c
		var before float64
		for _, x := range cs {
			if len(keep) > 0 && before >= p.TopP*mass {
				break
			}
			keep = append(keep, x)
			before += x.p
		}
		cs = keep
	}
	out := make([]int32, len(cs))
	for i, x := range cs {
		out[i] = x.id
	}
	return out
}

func TestSampleMatchesNaiveReference(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 40).Draw(rt, "vocab")
		// Few distinct values so ties are common.
		vals := rapid.SliceOfN(rapid.IntRange(-8, 8), n, n).Draw(rt, "logits")
		logits := make([]float32, n)
		for i, v := range vals {
			logits[i] = float32(v) * 0.5
		}
		p := Params{
			Temperature: rapid.SampledFrom([]float64{0, 0.5, 1, 2}).Draw(rt, "T"),
			TopP:        rapid.SampledFrom([]float64{1, 0.95, 0.7, 0.3, 0.01}).Draw(rt, "top_p"),
			MinP:        rapid.SampledFrom([]float64{0, 0.05, 0.5}).Draw(rt, "min_p"),
			TopK:        rapid.IntRange(0, n+1).Draw(rt, "top_k"),
		}
		if Validate(p) != nil {
			rt.Fatalf("generated invalid params %+v", p)
		}
		tok, lp, sup := Sample(logits, p, newRNG(rapid.Uint64().Draw(rt, "seed")), nil)
		want := naiveSupport(logits, p)
		active := (p.TopK > 0 && p.TopK < n) || p.TopP < 1 || p.MinP > 0
		if active && !slices.Equal(sup, want) {
			rt.Fatalf("support %v, naive %v", sup, want)
		}
		if !active && sup != nil {
			rt.Fatalf("support %v with no filter active", sup)
		}
		if !slices.Contains(want, tok) {
			rt.Fatalf("sampled %d outside the support %v", tok, want)
		}
		if p.Temperature == 0 && tok != want[0] {
			rt.Fatalf("greedy picked %d, argmax %d", tok, want[0])
		}
		if d := math.Abs(float64(lp - LogProb(logits, p.Temperature, tok))); d > 1e-5 {
			rt.Fatalf("logprob %v differs from LogProb by %v", lp, d)
		}
	})
}
