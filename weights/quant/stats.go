package quant

import "math"

// Stats is the error of served (dequantised) weights against the masters
// they were quantised from, over the finite master values.
type Stats struct {
	// N counts the finite elements compared.
	N int64
	// MaxAbs is max |served − master|.
	MaxAbs float64
	// MaxRel is max |served − master| / |master| over the elements whose
	// scale-normalised magnitude |master/scale| lies in the element
	// format's normal range (E4M3: ≥ 2^−6), where round to nearest bounds
	// it by half an ulp, 2^−4. Below that range the error is absolute (the
	// subnormal step) and MaxAbs covers it.
	MaxRel float64
	// SumSq is Σ (served − master)², for RMS.
	SumSq float64
}

// RMS is the root-mean-square error.
func (s Stats) RMS() float64 {
	if s.N == 0 {
		return 0
	}
	return math.Sqrt(s.SumSq / float64(s.N))
}

// Merge adds o's elements to s.
func (s *Stats) Merge(o Stats) {
	s.N += o.N
	s.MaxAbs = max(s.MaxAbs, o.MaxAbs)
	s.MaxRel = max(s.MaxRel, o.MaxRel)
	s.SumSq += o.SumSq
}

// Compare is the Stats of served against master, every element counted
// for MaxRel (no scale is known here): for tests and for schemes without
// a normal range.
func Compare(master, served []float32) Stats {
	var s Stats
	for i, x := range master[:len(served)] {
		if !finite(x) {
			continue
		}
		e := math.Abs(float64(served[i]) - float64(x))
		s.N++
		s.SumSq += e * e
		s.MaxAbs = max(s.MaxAbs, e)
		if x != 0 {
			s.MaxRel = max(s.MaxRel, e/math.Abs(float64(x)))
		}
	}
	return s
}

func finite(x float32) bool { return math.Float32bits(x)&0x7f800000 != 0x7f800000 }
