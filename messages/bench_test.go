package messages

import (
	"testing"
)

// benchBatch: 64 trajectories × 1,024 tokens with R3 routes [L=48, K=8] of
// 128 experts (uint8) — one GRPO mini-batch of a MoE model.
func benchBatch(b *testing.B) *TokenBatch {
	b.Helper()
	const B, T, L, K, E = 64, 1024, 48, 8, 128
	tb, err := NewTokenBatch(BatchSpec{Vocab: 151936, RouteLayers: L, RouteTopK: K, NumExperts: E})
	if err != nil {
		b.Fatal(err)
	}
	routes := make([]int32, T*L*K)
	for i := range routes {
		routes[i] = int32((i * 7919) % E)
	}
	for i := 0; i < B; i++ {
		tr := Trajectory{ID: "traj-" + string(rune('A'+i%26)), GroupID: "group", Reward: 1, PromptLen: 128,
			TokenIDs: make([]int32, T), Logprobs: make([]float32, T), LossMask: make([]uint8, T), PolicyVersions: make([]int32, T),
			Routes: routes}
		for j := range tr.TokenIDs {
			tr.TokenIDs[j] = int32((j*31 + i) % 151936)
			tr.Logprobs[j] = -float32(j%17) / 8
			if j >= 128 {
				tr.LossMask[j] = 1
			}
			tr.PolicyVersions[j] = 7
		}
		if err := tb.Append(tr); err != nil {
			b.Fatal(err)
		}
	}
	return tb
}

func BenchmarkEncodeTokenBatch(b *testing.B) {
	tb := benchBatch(b)
	enc, err := EncodeTokenBatch(tb)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := EncodeTokenBatch(tb); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeTokenBatch(b *testing.B) {
	enc, err := EncodeTokenBatch(benchBatch(b))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := DecodeTokenBatch(enc); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEnvelopeGroupReady(b *testing.B) {
	m := samples()[6]
	enc, err := Encode(m)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		enc, err := Encode(m)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Decode(enc); err != nil {
			b.Fatal(err)
		}
	}
}
