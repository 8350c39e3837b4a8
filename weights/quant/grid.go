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
// against xs to st. The error is taken in float32 (served and x differ by
// less than a factor of 2, so their difference is exact) and the relative
// error divides only when it sets a new maximum: this loop runs over every
// weight of every publish.
func encodeSegment(q []uint8, xs []float32, inv, s float32, st *Stats) {
	q = q[:len(xs)]
	var sumSq float64
	var maxAbs, maxRel float32
	n := 0
	for i, x := range xs {
		y := x * inv
		ax := abs32(x)
		if !(ax <= math.MaxFloat32) { // NaN, ±Inf: no error counted
			q[i] = EncodeE4M3(y)
			continue
		}
		c := encodeNotNaN(y)
		q[i] = c
		n++
		e := abs32(e4m3Table[c]*s - x)
		sumSq += float64(e) * float64(e)
		maxAbs = max(maxAbs, e)
		if e > maxRel*ax && abs32(y) >= minNormalE4M3 {
			maxRel = e / ax
		}
	}
	st.N += int64(n)
	st.SumSq += sumSq
	st.MaxAbs = max(st.MaxAbs, float64(maxAbs))
	st.MaxRel = max(st.MaxRel, float64(maxRel))
}

func abs32(x float32) float32 { return math.Float32frombits(math.Float32bits(x) &^ (1 << 31)) }

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
