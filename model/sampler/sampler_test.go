package sampler

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func newRNG(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x5eed)) }

// logitsFromProbs returns logits whose softmax is exactly probs (up to float32).
func logitsFromProbs(probs []float64) []float32 {
	out := make([]float32, len(probs))
	for i, p := range probs {
		if p == 0 {
			out[i] = float32(math.Inf(-1))
		} else {
			out[i] = float32(math.Log(p))
		}
	}
	return out
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name string
		p    Params
		ok   bool
	}{
		{"default", DefaultParams(), true},
		{"greedy", Params{Temperature: 0, TopP: 1}, true},
		{"all filters", Params{Temperature: 0.7, TopP: 0.9, MinP: 0.05, TopK: 40}, true},
		{"negative temperature", Params{Temperature: -1, TopP: 1}, false},
		{"nan temperature", Params{Temperature: math.NaN(), TopP: 1}, false},
		{"inf temperature", Params{Temperature: math.Inf(1), TopP: 1}, false},
		{"top_p zero", Params{Temperature: 1, TopP: 0}, false},
		{"top_p above one", Params{Temperature: 1, TopP: 1.01}, false},
		{"min_p negative", Params{Temperature: 1, TopP: 1, MinP: -0.1}, false},
		{"min_p above one", Params{Temperature: 1, TopP: 1, MinP: 1.5}, false},
		{"top_k negative", Params{Temperature: 1, TopP: 1, TopK: -1}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Validate(c.p)
			if (err == nil) != c.ok {
				t.Fatalf("Validate(%+v) = %v, want ok=%v", c.p, err, c.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidParams) {
				t.Fatalf("error %v does not wrap ErrInvalidParams", err)
			}
		})
	}
}

func TestGreedyIsArgmaxWithFullVocabLogprob(t *testing.T) {
	logits := []float32{0.5, 2, -1, 2, 1.9}
	var s Scratch
	for _, p := range []Params{
		{Temperature: 0, TopP: 1},
		{Temperature: 0, TopP: 0.5, TopK: 2, MinP: 0.1},
	} {
		tok, lp, _ := Sample(logits, p, nil, &s)
		if tok != 1 { // tie between 1 and 3 goes to the lowest id
			t.Fatalf("%+v: tok = %d, want 1", p, tok)
		}
		want := LogProb(logits, 1, 1)
		if lp != want {
			t.Fatalf("%+v: logprob %v, want T=1 logprob %v", p, lp, want)
		}
	}
}

func TestTopK1AlwaysArgmax(t *testing.T) {
	rng := newRNG(1)
	var s Scratch
	logits := make([]float32, 98)
	for trial := 0; trial < 200; trial++ {
		for i := range logits {
			logits[i] = float32(rng.NormFloat64() * 3)
		}
		want := int32(0)
		for i, l := range logits {
			if l > logits[want] {
				want = int32(i)
			}
		}
		tok, lp, sup := Sample(logits, Params{Temperature: 1.5, TopP: 1, TopK: 1}, rng, &s)
		if tok != want || !slices.Equal(sup, []int32{want}) {
			t.Fatalf("trial %d: tok %d support %v, want %d", trial, tok, sup, want)
		}
		if d := math.Abs(float64(lp - LogProb(logits, 1.5, tok))); d > 1e-6 {
			t.Fatalf("logprob mismatch %v", d)
		}
	}
}

func TestSupportSets(t *testing.T) {
	// probs by id: 0:.05 1:.40 2:.10 3:.25 4:.15 5:.05 (sum 1)
	// descending: 1(.40) 3(.25) 4(.15) 2(.10) 0(.05) 5(.05)
	logits := logitsFromProbs([]float64{.05, .40, .10, .25, .15, .05})
	cases := []struct {
		name string
		p    Params
		want []int32
	}{
		{"no filter", Params{Temperature: 1, TopP: 1}, nil},
		{"top_k >= vocab is off", Params{Temperature: 1, TopP: 1, TopK: 6}, nil},
		{"top_k 3", Params{Temperature: 1, TopP: 1, TopK: 3}, []int32{1, 3, 4}},
		{"top_k 5 tie by id", Params{Temperature: 1, TopP: 1, TopK: 5}, []int32{1, 3, 4, 2, 0}},
		// mass before: 1:0 3:.40 4:.65 2:.80 → keep while before < .6 → {1,3}... 4 has .65 ≥ .6
		{"top_p 0.6", Params{Temperature: 1, TopP: 0.6}, []int32{1, 3}},
		{"top_p 0.66 takes the token that crosses it", Params{Temperature: 1, TopP: 0.66}, []int32{1, 3, 4}},
		{"top_p tiny keeps one", Params{Temperature: 1, TopP: 1e-9}, []int32{1}},
		// min_p .5 → threshold .20: {1,3}
		{"min_p 0.5", Params{Temperature: 1, TopP: 1, MinP: 0.5}, []int32{1, 3}},
		// min_p .3 → threshold .12: {1,3,4}
		{"min_p 0.3", Params{Temperature: 1, TopP: 1, MinP: 0.3}, []int32{1, 3, 4}},
		// top_k 4 → {1,3,4,2} mass .9; top_p .5 → limit .45: before 0, .40 → {1,3}
		{"top_k then top_p renormalised", Params{Temperature: 1, TopP: 0.5, TopK: 4}, []int32{1, 3}},
		// top_k 2 → {1,3} mass .65, top_p .6 → limit .39: {1} only... before(.40) ≥ .39
		{"top_p over top_k survivors", Params{Temperature: 1, TopP: 0.6, TopK: 2}, []int32{1}},
	}
	rng := newRNG(2)
	var s Scratch
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for i := 0; i < 50; i++ {
				tok, _, sup := Sample(logits, c.p, rng, &s)
				if !slices.Equal(sup, c.want) {
					t.Fatalf("support %v, want %v", sup, c.want)
				}
				if c.want != nil && !slices.Contains(c.want, tok) {
					t.Fatalf("sampled %d outside support %v", tok, c.want)
				}
			}
		})
	}
}

// TestTopPBoundaryIsExclusive: a token is kept iff the mass strictly before
// it is below top_p. With four equal tokens and top_p 0.5 the first two
// reach exactly half the mass, so the third is dropped.
func TestTopPBoundaryIsExclusive(t *testing.T) {
	logits := []float32{0, 0, 0, 0}
	for _, c := range []struct {
		topP float64
		want []int32
	}{{0.5, []int32{0, 1}}, {0.25, []int32{0}}, {0.75, []int32{0, 1, 2}}, {0.76, []int32{0, 1, 2, 3}}} {
		_, _, sup := Sample(logits, Params{Temperature: 1, TopP: c.topP}, newRNG(1), nil)
		if !slices.Equal(sup, c.want) {
			t.Errorf("top_p %v: support %v, want %v", c.topP, sup, c.want)
		}
	}
}

func TestTemperatureChangesSupportAndLogprob(t *testing.T) {
	// At T→small the distribution sharpens: top_p 0.9 keeps fewer tokens.
	logits := logitsFromProbs([]float64{.05, .40, .10, .25, .15, .05})
	var s Scratch
	_, _, warm := Sample(logits, Params{Temperature: 1, TopP: 0.9}, newRNG(3), &s)
	warm = slices.Clone(warm)
	tok, lp, cold := Sample(logits, Params{Temperature: 0.25, TopP: 0.9}, newRNG(3), &s)
	if len(cold) >= len(warm) {
		t.Fatalf("T=0.25 support %v not smaller than T=1 support %v", cold, warm)
	}
	if want := LogProb(logits, 0.25, tok); lp != want {
		t.Fatalf("logprob %v, want log_softmax(logits/T) %v", lp, want)
	}
}

func TestFrequenciesMatchProbabilities(t *testing.T) {
	probs := []float64{.05, .40, .10, .25, .15, .05}
	logits := logitsFromProbs(probs)
	cases := []struct {
		name string
		p    Params
		want []float64
	}{
		{"plain", Params{Temperature: 1, TopP: 1}, probs},
		// top_k 3 → {1,3,4} renormalised by .80
		{"top_k 3", Params{Temperature: 1, TopP: 1, TopK: 3}, []float64{0, .5, 0, .3125, .1875, 0}},
		// T=2: p ∝ sqrt(p)
		{"temperature 2", Params{Temperature: 2, TopP: 1}, sqrtNorm(probs)},
	}
	const n = 200000
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rng := newRNG(4)
			var s Scratch
			counts := make([]int, len(probs))
			for i := 0; i < n; i++ {
				tok, _, _ := Sample(logits, c.p, rng, &s)
				counts[tok]++
			}
			for i, w := range c.want {
				got := float64(counts[i]) / n
				// 5 standard deviations of a binomial proportion.
				tol := 5*math.Sqrt(w*(1-w)/n) + 1e-9
				if math.Abs(got-w) > tol {
					t.Errorf("id %d: frequency %.4f, want %.4f ± %.4f", i, got, w, tol)
				}
			}
		})
	}
}

func sqrtNorm(p []float64) []float64 {
	out := make([]float64, len(p))
	var s float64
	for i, v := range p {
		out[i] = math.Sqrt(v)
		s += out[i]
	}
	for i := range out {
		out[i] /= s
	}
	return out
}

func TestDeterministicForSeed(t *testing.T) {
	logits := make([]float32, 98)
	r := newRNG(9)
	for i := range logits {
		logits[i] = float32(r.NormFloat64())
	}
	run := func() []int32 {
		rng := newRNG(42)
		var s Scratch
		var out []int32
		for i := 0; i < 500; i++ {
			tok, _, _ := Sample(logits, Params{Temperature: 0.8, TopP: 0.95, TopK: 20, MinP: 0.01}, rng, &s)
			out = append(out, tok)
		}
		return out
	}
	a, b := run(), run()
	if !slices.Equal(a, b) {
		t.Fatal("same seed gave different token sequences")
	}
	distinct := map[int32]bool{}
	for _, v := range a {
		distinct[v] = true
	}
	if len(distinct) < 3 {
		t.Fatalf("only %d distinct tokens in 500 draws: sampler is not sampling", len(distinct))
	}
}

func TestNeverSamplesMaskedTokens(t *testing.T) {
	inf := float32(math.Inf(-1))
	logits := []float32{inf, 0, inf, float32(math.NaN()), 0, inf}
	rng := newRNG(5)
	var s Scratch
	for i := 0; i < 2000; i++ {
		tok, lp, _ := Sample(logits, DefaultParams(), rng, &s)
		if tok != 1 && tok != 4 {
			t.Fatalf("sampled masked token %d", tok)
		}
		if math.Abs(float64(lp)-math.Log(0.5)) > 1e-6 {
			t.Fatalf("logprob %v, want log 0.5", lp)
		}
	}
}

func TestAllMaskedPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for all -Inf logits")
		}
	}()
	inf := float32(math.Inf(-1))
	Sample([]float32{inf, inf}, DefaultParams(), newRNG(1), nil)
}

func TestLogSoftmaxHelpers(t *testing.T) {
	logits := []float32{1, 2, 3, -1}
	out := LogSoftmax(logits, 1, make([]float32, 4))
	var sum float64
	for i, v := range out {
		sum += math.Exp(float64(v))
		if v != LogProb(logits, 1, int32(i)) {
			t.Fatalf("LogSoftmax[%d]=%v != LogProb %v", i, v, LogProb(logits, 1, int32(i)))
		}
	}
	if math.Abs(sum-1) > 1e-6 {
		t.Fatalf("probabilities sum to %v", sum)
	}
	// Greedy (T=0) reports at T=1.
	if LogProb(logits, 0, 2) != LogProb(logits, 1, 2) {
		t.Fatal("T=0 should report T=1 logprob")
	}
	// Support renormalisation: over {2,1} the prob of 2 is e^3/(e^3+e^2).
	got := SupportLogProb(logits, 1, []int32{2, 1, -1}, 2)
	want := 3 - math.Log(math.Exp(3)+math.Exp(2))
	if math.Abs(float64(got)-want) > 1e-6 {
		t.Fatalf("SupportLogProb = %v, want %v", got, want)
	}
	if !math.IsInf(float64(SupportLogProb(logits, 1, []int32{2, 1}, 0)), -1) {
		t.Fatal("token outside support should have -Inf logprob")
	}
	if SupportLogProb(logits, 1, nil, 0) != LogProb(logits, 1, 0) {
		t.Fatal("nil support should be the full vocabulary")
	}
}

func TestNoAllocationsWithScratch(t *testing.T) {
	logits := make([]float32, 98)
	for i := range logits {
		logits[i] = float32(i%7) * 0.3
	}
	rng := newRNG(1)
	var s Scratch
	for _, p := range []Params{DefaultParams(), {Temperature: 0.7, TopP: 0.9, TopK: 20, MinP: 0.02}} {
		Sample(logits, p, rng, &s)
		if a := testing.AllocsPerRun(100, func() { Sample(logits, p, rng, &s) }); a != 0 {
			t.Fatalf("%+v: %v allocations per call", p, a)
		}
	}
}

func BenchmarkSample(b *testing.B) {
	for _, bc := range []struct {
		name string
		p    Params
	}{
		{"plain", DefaultParams()},
		{"topk40_topp0.9", Params{Temperature: 0.8, TopP: 0.9, TopK: 40}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			logits := make([]float32, 98)
			r := newRNG(1)
			for i := range logits {
				logits[i] = float32(r.NormFloat64())
			}
			var s Scratch
			b.ReportAllocs()
			for b.Loop() {
				Sample(logits, bc.p, r, &s)
			}
		})
	}
}
