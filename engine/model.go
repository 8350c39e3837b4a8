package engine

import (
	"math"
)

// Model is the policy the engine serves. NextLogits writes the logits of
// the token that follows tokens into out (len(out) == VocabSize()). It must
// be safe for concurrent use while the model is not modified; the engine
// never modifies it and swaps whole models on a weight update.
type Model interface {
	VocabSize() int
	MaxSeqLen() int
	NextLogits(tokens []int32, out []float32)
}

// ModelLoader loads a Model from a checkpoint directory (weights update,
// LoRA adapters). The CLI wires model.LoadServing here.
type ModelLoader func(dir string) (Model, error)

// HashModel is a deterministic stand-in policy: the logits of the next token
// are a hash of the seed, the last Context tokens and the candidate id,
// scaled to [-Spread, Spread]. Two HashModels with different seeds act like
// two different weight versions. EOS gets EOSBias added so generations end
// at a controllable rate.
type HashModel struct {
	Seed    uint64
	Vocab   int
	MaxLen  int
	Context int
	Spread  float32
	EOSID   int32
	EOSBias float32
}

var _ Model = (*HashModel)(nil)

// NewHashModel returns a HashModel over the character tokenizer's 98 ids
// with a 4-token context and EOS made unlikely.
func NewHashModel(seed uint64) *HashModel {
	return &HashModel{Seed: seed, Vocab: 98, MaxLen: 4096, Context: 4, Spread: 4, EOSID: 2, EOSBias: -6}
}

// VocabSize implements Model.
func (h *HashModel) VocabSize() int { return h.Vocab }

// MaxSeqLen implements Model.
func (h *HashModel) MaxSeqLen() int { return h.MaxLen }

// NextLogits implements Model.
func (h *HashModel) NextLogits(tokens []int32, out []float32) {
	x := h.Seed ^ 0x9e3779b97f4a7c15
	start := max(0, len(tokens)-h.Context)
	for _, t := range tokens[start:] {
		x = splitmix(x ^ uint64(uint32(t)))
	}
	for i := range out[:h.Vocab] {
		v := splitmix(x + uint64(i)*0xbf58476d1ce4e5b9)
		u := float32(v>>11) / float32(1<<53) // [0,1)
		out[i] = (2*u - 1) * h.Spread
	}
	if h.EOSID >= 0 && int(h.EOSID) < h.Vocab {
		out[h.EOSID] += h.EOSBias
	}
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// finiteLP maps -Inf/NaN logprobs to vLLM's -9999 so JSON stays valid.
func finiteLP(v float32) float32 {
	if math.IsInf(float64(v), 0) || math.IsNaN(float64(v)) {
		return -9999
	}
	return v
}
