package sampler

import "math"

// LogSumExp returns log Σ exp(logits[i]·invT) computed stably in float64.
// NaN entries count as -Inf. It returns -Inf when no entry is finite.
func LogSumExp(logits []float32, invT float64) float64 {
	maxV := math.Inf(-1)
	for _, l := range logits {
		if v := float64(l) * invT; v > maxV {
			maxV = v
		}
	}
	if math.IsInf(maxV, 0) {
		return maxV
	}
	var sum float64
	for _, l := range logits {
		v := float64(l) * invT
		if v == v {
			sum += math.Exp(v - maxV)
		}
	}
	return maxV + math.Log(sum)
}

// LogSoftmax writes log_softmax(logits/T) into out (len(out) ≥ len(logits))
// and returns out[:len(logits)]. T ≤ 0 is treated as 1, matching the logprob
// Sample reports for greedy decoding. out may alias logits.
func LogSoftmax(logits []float32, temperature float64, out []float32) []float32 {
	invT := invTemp(temperature)
	lse := LogSumExp(logits, invT)
	out = out[:len(logits)]
	for i, l := range logits {
		out[i] = float32(float64(l)*invT - lse)
	}
	return out
}

// LogProb returns log_softmax(logits/T)[tok] without writing a buffer
// (T ≤ 0 is treated as 1). It equals the logprob Sample returns for tok.
func LogProb(logits []float32, temperature float64, tok int32) float32 {
	invT := invTemp(temperature)
	return float32(float64(logits[tok])*invT - LogSumExp(logits, invT))
}

// SupportLogProb returns the log-probability of tok renormalised over the
// candidate set support at temperature T: log softmax over support only.
// This is how a trainer replays a top-k/top-p sample (SkyRL "sample
// support"); ids < 0 are padding and skipped. It returns -Inf if tok is not
// in support, and the full-vocabulary LogProb when support is nil.
func SupportLogProb(logits []float32, temperature float64, support []int32, tok int32) float32 {
	if support == nil {
		return LogProb(logits, temperature, tok)
	}
	invT := invTemp(temperature)
	maxV, found := math.Inf(-1), false
	for _, id := range support {
		if id < 0 {
			continue
		}
		if id == tok {
			found = true
		}
		if v := float64(logits[id]) * invT; v > maxV {
			maxV = v
		}
	}
	if !found {
		return float32(math.Inf(-1))
	}
	var sum float64
	for _, id := range support {
		if id >= 0 {
			sum += math.Exp(float64(logits[id])*invT - maxV)
		}
	}
	return float32(float64(logits[tok])*invT - maxV - math.Log(sum))
}

func invTemp(t float64) float64 {
	if t <= 0 {
		return 1
	}
	return 1 / t
}
