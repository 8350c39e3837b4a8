package sampler

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
)

// ErrInvalidParams is wrapped by every error Validate returns.
var ErrInvalidParams = errors.New("sampler: invalid sampling params")

// Params are the per-request sampling parameters. The zero value is NOT
// "off" for TopP (0 is invalid); use DefaultParams for plain sampling.
type Params struct {
	// Temperature divides the logits; 0 selects greedy decoding. Must be ≥ 0
	// and finite.
	Temperature float64
	// TopP keeps the smallest set of most-probable tokens whose mass reaches
	// TopP. In (0, 1]; 1 disables it.
	TopP float64
	// MinP drops tokens whose probability is below MinP times the largest
	// probability. In [0, 1]; 0 disables it.
	MinP float64
	// TopK keeps the K most probable tokens. ≥ 0; 0 disables it (as does
	// any K ≥ vocabulary size).
	TopK int
}

// DefaultParams is unfiltered sampling at temperature 1.
func DefaultParams() Params { return Params{Temperature: 1, TopP: 1} }

// Validate reports the first invalid field, naming it and its allowed range.
func Validate(p Params) error {
	switch {
	case math.IsNaN(p.Temperature) || math.IsInf(p.Temperature, 0) || p.Temperature < 0:
		return fmt.Errorf("%w: temperature must be a finite number >= 0 (0 = greedy), got %v", ErrInvalidParams, p.Temperature)
	case math.IsNaN(p.TopP) || p.TopP <= 0 || p.TopP > 1:
		return fmt.Errorf("%w: top_p must be in (0, 1] (1 = off), got %v", ErrInvalidParams, p.TopP)
	case math.IsNaN(p.MinP) || p.MinP < 0 || p.MinP > 1:
		return fmt.Errorf("%w: min_p must be in [0, 1] (0 = off), got %v", ErrInvalidParams, p.MinP)
	case p.TopK < 0:
		return fmt.Errorf("%w: top_k must be >= 0 (0 = off), got %d", ErrInvalidParams, p.TopK)
	}
	return nil
}

// Scratch holds the buffers Sample reuses between calls. The zero value is
// ready to use; it grows to the vocabulary size on first use.
type Scratch struct {
	probs []float64 // softmax(z), unnormalised until divided by sum
	idx   []int32   // candidate ids, sorted by descending prob when filtering
}

func (s *Scratch) grow(n int) {
	if cap(s.probs) < n {
		s.probs = make([]float64, n)
		s.idx = make([]int32, n)
	}
	s.probs = s.probs[:n]
	s.idx = s.idx[:n]
}

// byProb sorts Scratch.idx by descending probability, ties by ascending id.
// It is a named type over *Scratch so sort.Sort needs no allocation.
type byProb Scratch

func (b *byProb) Len() int      { return len(b.idx) }
func (b *byProb) Swap(i, j int) { b.idx[i], b.idx[j] = b.idx[j], b.idx[i] }
func (b *byProb) Less(i, j int) bool {
	a, c := b.idx[i], b.idx[j]
	if b.probs[a] != b.probs[c] {
		return b.probs[a] > b.probs[c]
	}
	return a < c
}

// filtering reports whether any candidate filter is active for vocab size n.
func filtering(p Params, n int) bool {
	return (p.TopK > 0 && p.TopK < n) || p.TopP < 1 || p.MinP > 0
}

// Sample draws one token from logits under p. See the package comment for
// the exact semantics of tok, logprob and support. p should have passed
// Validate; logits must hold at least one finite value (NaN counts as -Inf).
// A nil s allocates a temporary Scratch. rng may be nil only for greedy
// decoding.
func Sample(logits []float32, p Params, rng *rand.Rand, s *Scratch) (tok int32, logprob float32, support []int32) {
	n := len(logits)
	if s == nil {
		s = new(Scratch)
	}
	s.grow(n)
	greedy := p.Temperature == 0
	invT := 1.0
	if !greedy {
		invT = 1 / p.Temperature
	}

	maxL, argmax, sum := s.softmax(logits, invT)
	logSum := math.Log(sum)
	lp := func(i int) float32 { return float32((float64(logits[i])-maxL)*invT - logSum) }

	active := filtering(p, n)
	if !active {
		if greedy {
			return int32(argmax), lp(argmax), nil
		}
		u := rng.Float64() * sum
		i := pick(s.probs, u)
		return int32(i), lp(i), nil
	}

	cand := s.candidates(p)
	if greedy {
		// argmax is cand[0]: both break ties towards the lowest id.
		return int32(argmax), lp(argmax), cand
	}
	id := s.draw(cand, rng)
	return id, lp(int(id)), cand
}

// softmax fills s.probs with the stable unnormalised softmax in float64,
// e_i = exp((l_i - max)/T), and returns the maximum logit, its index and
// the sum of the e_i.
func (s *Scratch) softmax(logits []float32, invT float64) (maxL float64, argmax int, sum float64) {
	maxL, argmax = math.Inf(-1), -1
	for i, l := range logits {
		if v := float64(l); v > maxL { // NaN never wins
			maxL, argmax = v, i
		}
	}
	if argmax < 0 || math.IsInf(maxL, 1) {
		panic(fmt.Sprintf("sampler: logits have no finite maximum (max %v)", maxL))
	}
	for i, l := range logits {
		v := float64(l)
		e := 0.0
		if v == v { // skip NaN
			e = math.Exp((v - maxL) * invT)
		}
		s.probs[i] = e
		sum += e
	}
	return maxL, argmax, sum
}

// candidates returns the ids that survive min_p, top_k and top_p, in
// descending probability.
func (s *Scratch) candidates(p Params) []int32 {
	for i := range s.idx {
		s.idx[i] = int32(i)
	}
	sort.Sort((*byProb)(s))
	cand := s.idx
	if p.MinP > 0 {
		// probs[cand[0]] is the max (== 1 before normalisation, e^0).
		thr := p.MinP * s.probs[cand[0]]
		k := len(cand)
		for k > 1 && s.probs[cand[k-1]] < thr {
			k--
		}
		cand = cand[:k]
	}
	if p.TopK > 0 && p.TopK < len(cand) {
		cand = cand[:p.TopK]
	}
	if p.TopP < 1 {
		var mass float64
		for _, id := range cand {
			mass += s.probs[id]
		}
		limit := p.TopP * mass
		var before float64
		k := 0
		for k < len(cand) && (k == 0 || before < limit) {
			before += s.probs[cand[k]]
			k++
		}
		cand = cand[:k]
	}
	return cand
}

// draw picks one candidate in proportion to its probability.
func (s *Scratch) draw(cand []int32, rng *rand.Rand) int32 {
	var mass float64
	for _, id := range cand {
		mass += s.probs[id]
	}
	u := rng.Float64() * mass
	for _, id := range cand {
		u -= s.probs[id]
		if u < 0 {
			return id
		}
	}
	// Rounding left u ≥ 0 after the last candidate: take the last one with
	// non-zero mass, never a zero-probability token.
	last := cand[len(cand)-1]
	for k := len(cand) - 1; k > 0 && s.probs[last] == 0; k-- {
		last = cand[k-1]
	}
	return last
}

// pick returns the index at which the running sum of w first exceeds u,
// falling back to the last index with non-zero weight.
func pick(w []float64, u float64) int {
	last := -1
	for i, v := range w {
		if v > 0 {
			last = i
		}
		u -= v
		if u < 0 && v > 0 {
			return i
		}
	}
	return last
}
