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

// BenchmarkEnvelopeSmall is the frame of a heartbeat-sized control message
// (EngineHealth), encoded and decoded: the per-message cost of the wire
// codec on a bus (and in the simulator, for every message).
func BenchmarkEnvelopeSmall(b *testing.B) {
	m := EngineHealth{Header: hdr(3), Engine: "e1", URL: "http://127.0.0.1:8001", Healthy: true}
	b.ReportAllocs()
	for b.Loop() {
		enc, err := Encode(m)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Decode(enc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkString is String() of one message of every kind: what a shell's
// log line or the simulator's event log pays per message.
func BenchmarkString(b *testing.B) {
	ms := samples()
	b.ReportAllocs()
	for b.Loop() {
		for _, m := range ms {
			_ = m.String()
		}
	}
}

// BenchmarkTokenBatchGroup encodes and decodes one GRPO group's batch (4
// trajectories × 64 tokens): the size a rollout hands on per group and the
// controller merges.
func BenchmarkTokenBatchGroup(b *testing.B) {
	tb, err := NewTokenBatch(BatchSpec{})
	if err != nil {
		b.Fatal(err)
	}
	for i := range 4 {
		n := 64
		tr := Trajectory{ID: "p7#3." + string(rune('0'+i)), GroupID: "p7#3", PromptLen: 16,
			TokenIDs: make([]int32, n), Logprobs: make([]float32, n), LossMask: make([]uint8, n), PolicyVersions: make([]int32, n)}
		if err := tb.Append(tr); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		enc, err := EncodeTokenBatch(tb)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := DecodeTokenBatch(enc); err != nil {
			b.Fatal(err)
		}
	}
}
