package transformer

import (
	"math"
)

// The rotary embedding follows transformers' modeling_rope_utils.py
// (huggingface/transformers @ef468064: _compute_default_rope_parameters,
// _compute_linear_scaling_rope_parameters, _compute_llama3_parameters;
// _compute_yarn_parameters with DeepSeek's mscale/mscale_all_dim as in the
// transformers releases that carry them) and each modeling file's
// RotaryEmbedding.forward: freqs = inv_freq · position in float32, emb =
// cat(freqs, freqs), cos/sin of it times the rope's attention factor, and
// apply_rotary_pos_emb's rotate_half (q·cos + rotate_half(q)·sin).
// Arithmetic is float32 where torch's is, so the tables match torch's to
// the last bit or so.

// ropeMaxTable bounds the precomputed cos/sin table; positions beyond it
// are computed on the fly (same values, slower).
const ropeMaxTable = 16384

type rope struct {
	dim        int       // rotated dims per head (even)
	inv        []float32 // dim/2 inverse frequencies
	attnFactor float32   // multiplies cos and sin (yarn), 1 otherwise
	interleave bool      // DeepSeek rope_interleave: pairs (2i, 2i+1)
	n          int       // table positions
	cos, sin   []float32 // [n][dim/2]
}

// ropeInvFreq computes the inverse frequencies and the attention factor of
// c's rope over dim rotated dimensions.
func ropeInvFreq(c *Config, dim int) ([]float32, float32) {
	half := dim / 2
	base := c.RopeTheta
	def := make([]float32, half)
	for i := range def {
		// torch: base ** (arange(0, dim, 2).float() / dim), then 1.0 / it,
		// each step in float32.
		e := float32(2*i) / float32(dim)
		p := float32(math.Pow(base, float64(e)))
		def[i] = 1 / p
	}
	r := c.Rope
	if r == nil {
		return def, 1
	}
	switch r.Type {
	case "linear":
		for i := range def {
			def[i] /= float32(r.Factor)
		}
		return def, 1
	case "llama3":
		return llama3InvFreq(def, r), 1
	case "yarn":
		return yarnInvFreq(c, r, dim)
	}
	return def, 1
}

// llama3InvFreq is _compute_llama3_parameters: wavelengths longer than
// old_context_len/low_freq_factor are divided by factor, shorter than
// old_context_len/high_freq_factor kept, and those in between interpolated
// by the smooth factor.
func llama3InvFreq(inv []float32, r *RopeScaling) []float32 {
	factor := float32(r.Factor)
	old := float32(r.OriginalMaxPositionEmbeddings)
	lowWave := old / float32(r.LowFreqFactor)
	highWave := old / float32(r.HighFreqFactor)
	out := make([]float32, len(inv))
	for i, f := range inv {
		wave := float32(2*math.Pi) / f
		v := f
		if wave > lowWave {
			v = f / factor
		}
		if !(wave < highWave) && !(wave > lowWave) {
			smooth := (old/wave - float32(r.LowFreqFactor)) / float32(r.HighFreqFactor-r.LowFreqFactor)
			v = (1-smooth)*v/factor + smooth*v
		}
		out[i] = v
	}
	return out
}

// yarnGetMScale is DeepSeek's yarn_get_mscale (modeling_deepseek_v3.py
// @00b676f8): 0.1·mscale·ln(scale) + 1 for scale > 1, else 1.
func yarnGetMScale(scale, mscale float64) float64 {
	if scale <= 1 {
		return 1
	}
	return 0.1*mscale*math.Log(scale) + 1
}

// yarnInvFreq is _compute_yarn_parameters: frequencies blended between
// extrapolation and interpolation (by factor) with a linear ramp over the
// correction range of beta_fast..beta_slow rotations (floor/ceil, clamped
// to [0, dim−1]) at original_max_position_embeddings (max_position_embeddings
// when absent); the attention factor is attention_factor when given, else
// get_mscale(factor, mscale)/get_mscale(factor, mscale_all_dim) when both
// are set, else get_mscale(factor).
func yarnInvFreq(c *Config, r *RopeScaling, dim int) ([]float32, float32) {
	base := c.RopeTheta
	factor := r.Factor
	orig := r.OriginalMaxPositionEmbeddings
	if orig <= 0 {
		orig = c.MaxPositionEmbeddings
	}
	attn := r.AttentionFactor
	if attn == 0 {
		if r.MScale != 0 && r.MScaleAllDim != 0 {
			attn = yarnGetMScale(factor, r.MScale) / yarnGetMScale(factor, r.MScaleAllDim)
		} else {
			attn = yarnGetMScale(factor, 1)
		}
	}
	betaFast, betaSlow := r.BetaFast, r.BetaSlow
	if betaFast == 0 {
		betaFast = 32
	}
	if betaSlow == 0 {
		betaSlow = 1
	}
	corrDim := func(rot float64) float64 {
		return float64(dim) * math.Log(float64(orig)/(rot*2*math.Pi)) / (2 * math.Log(base))
	}
	low := max(math.Floor(corrDim(betaFast)), 0)
	high := min(math.Ceil(corrDim(betaSlow)), float64(dim-1))
	if low == high {
		high += 0.001
	}
	half := dim / 2
	inv := make([]float32, half)
	for i := range inv {
		posFreq := float32(math.Pow(base, float64(float32(2*i)/float32(dim))))
		extra := 1 / posFreq
		inter := 1 / (float32(factor) * posFreq)
		ramp := float32((float64(i) - low) / (high - low))
		ramp = min(max(ramp, 0), 1)
		ef := 1 - ramp
		inv[i] = inter*(1-ef) + extra*ef
	}
	return inv, float32(attn)
}

// softmaxScale is the attention's score scale: head_dim^−½, and for
// DeepSeek-V3 with rope_scaling and a non-zero mscale_all_dim times
// yarn_get_mscale(factor, mscale_all_dim)² (DeepseekV3Attention.__init__,
// modeling_deepseek_v3.py @00b676f8).
func softmaxScale(c *Config) float32 {
	s := math.Pow(float64(c.QKHeadDim()), -0.5)
	if c.MLA() && c.Rope != nil && c.Rope.MScaleAllDim != 0 {
		m := yarnGetMScale(c.Rope.Factor, c.Rope.MScaleAllDim)
		s *= m * m
	}
	return float32(s)
}

func newRope(c *Config) *rope {
	dim := c.RopeDim()
	inv, attn := ropeInvFreq(c, dim)
	r := &rope{dim: dim, inv: inv, attnFactor: attn, interleave: c.MLA() && c.RopeInterleave}
	r.n = min(c.MaxPositionEmbeddings, ropeMaxTable)
	half := dim / 2
	r.cos = make([]float32, r.n*half)
	r.sin = make([]float32, r.n*half)
	for p := range r.n {
		r.at(p, r.cos[p*half:(p+1)*half], r.sin[p*half:(p+1)*half])
	}
	return r
}

// at computes position p's cos and sin (dim/2 each).
func (r *rope) at(p int, cos, sin []float32) {
	for i, f := range r.inv {
		a := f * float32(p) // float32, as torch's inv_freq @ position_ids
		cos[i] = float32(math.Cos(float64(a))) * r.attnFactor
		sin[i] = float32(math.Sin(float64(a))) * r.attnFactor
	}
}

// apply rotates x (one head, r.dim values) in place for position p;
// scratch holds dim floats (interleaved layout and positions beyond the
// table).
func (r *rope) apply(x []float32, p int, scratch []float32) {
	half := r.dim / 2
	var cos, sin []float32
	if p < r.n {
		cos, sin = r.cos[p*half:(p+1)*half], r.sin[p*half:(p+1)*half]
	} else {
		cos, sin = scratch[:half], scratch[half:r.dim]
		r.at(p, cos, sin)
		scratch = scratch[r.dim:]
	}
	x = x[:r.dim]
	if r.interleave {
		// apply_rotary_pos_emb_interleave: view (d/2, 2), transpose, so
		// element 2i goes to i and 2i+1 to i+d/2, then rotate_half. The
		// result stays in that layout for queries and keys alike.
		t := scratch[:r.dim]
		for i := range half {
			t[i], t[i+half] = x[2*i], x[2*i+1]
		}
		copy(x, t)
	}
	x1, x2 := x[:half], x[half:]
	for i := range half {
		a, b := x1[i], x2[i]
		x1[i] = a*cos[i] + (-b)*sin[i]
		x2[i] = b*cos[i] + a*sin[i]
	}
}
