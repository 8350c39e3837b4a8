package quant

import "math"

// minNormalE4M3 is E4M3's smallest normal, 2^−6: a scale-normalised value
// at least this large is rounded with a relative error ≤ 2^−4.
const minNormalE4M3 = 0x1p-6

// scaler turns a block's amax (largest finite |x|) into its dequantisation
// scale s and the multiplier inv ≈ 1/s applied before rounding.
type scaler func(amax float32) (s, inv float32)

// quantizeGrid quantises the rows×cols row-major matrix w to E4M3 codes in
// q, one scale per bm×bn block (edge blocks are partial); scales receives
// block (bi, bj)'s scale at bi·⌈cols/bn⌉+bj. It returns the error of the
// dequantised values (code·s) against w. Two passes over each block row —
// amax, then round — read w row by row, so the access stays sequential.
func quantizeGrid(q []uint8, scales []float32, w []float32, rows, cols, bm, bn int, scale scaler) Stats {
	nbj := (cols + bn - 1) / bn
	amax := make([]float32, nbj)
	inv := make([]float32, nbj)
	var st Stats
	for r0 := 0; r0 < rows; r0 += bm {
		r1 := min(r0+bm, rows)
		clear(amax)
		for r := r0; r < r1; r++ {
			row := w[r*cols : (r+1)*cols]
			for bj := range nbj {
				amax[bj] = max(amax[bj], absMax(row[bj*bn:min((bj+1)*bn, cols)]))
			}
		}
		bi := r0 / bm
		for bj := range nbj {
			s, iv := scale(amax[bj])
			scales[bi*nbj+bj], inv[bj] = s, iv
		}
		for r := r0; r < r1; r++ {
			row := w[r*cols : (r+1)*cols]
			qrow := q[r*cols : (r+1)*cols]
			for bj := range nbj {
				lo, hi := bj*bn, min((bj+1)*bn, cols)
				encodeSegment(qrow[lo:hi], row[lo:hi], inv[bj], scales[bi*nbj+bj], &st)
			}
		}
	}
	return st
}

// absMax is the largest finite |x| in xs (0 when there is none).
func absMax(xs []float32) float32 {
	var m uint32
	for _, x := range xs {
		a := math.Float32bits(x) & 0x7fffffff
		if a < 0x7f800000 && a > m { // finite: positive floats order as their bits
			m = a
		}
	}
	return math.Float32frombits(m)
}

// encodeSegment rounds xs·inv to E4M3 into q and adds the error of q·s
// against xs to st.
func encodeSegment(q []uint8, xs []float32, inv, s float32, st *Stats) {
	q = q[:len(xs)]
	var sumSq, maxAbs, maxRel float64
	n := 0
	for i, x := range xs {
		c := EncodeE4M3(x * inv)
		q[i] = c
		if !finite(x) {
			continue
		}
		n++
		e := math.Abs(float64(e4m3Table[c]*s) - float64(x))
		sumSq += e * e
		maxAbs = max(maxAbs, e)
		if a := math.Abs(float64(x * inv)); a >= minNormalE4M3 {
			maxRel = max(maxRel, e/math.Abs(float64(x)))
		}
	}
	st.N += int64(n)
	st.SumSq += sumSq
	st.MaxAbs = max(st.MaxAbs, maxAbs)
	st.MaxRel = max(st.MaxRel, maxRel)
}

// dequantizeGrid is quantizeGrid's inverse: out[r, c] = E4M3(q[r, c]) ·
// scales[block of (r, c)].
func dequantizeGrid(out []float32, q []uint8, scales []float32, rows, cols, bm, bn int) {
	nbj := (cols + bn - 1) / bn
	for r := range rows {
		qrow := q[r*cols : (r+1)*cols]
		orow := out[r*cols : (r+1)*cols]
		srow := scales[(r/bm)*nbj : (r/bm+1)*nbj]
		for bj, s := range srow {
			lo, hi := bj*bn, min((bj+1)*bn, cols)
			o := orow[lo:hi]
			for i, c := range qrow[lo:hi] {
				o[i] = e4m3Table[c] * s
			}
		}
	}
}
