package vllmwire

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/asyncrl/asyncrl/messages"
)

// The R3 comparison of BENCHMARKS.md ("R3 routes: packed vs JSON"): one
// mini-batch of 64 sequences × 2,048 tokens of a MoE model with 8 layers,
// top-8 of 64 experts, moved three ways from rollout to trainer:
//
//   - packed: the token batch's Arrow routed_experts column (uint8
//     list<fixed_size_list>) with the rest of the batch, encode + decode;
//   - JSON lists: per sequence [tokens][layers][top_k] nested JSON arrays
//     (the form SkyRL packed before R3, prime-rl's routed_experts
//     list[list[list[int]]]), marshal + unmarshal + flatten;
//   - JSON + base64 per turn: vLLM's wire form, each of 4 turns of 512
//     tokens a JSON body with routed_experts as base64 .npy, marshal +
//     unmarshal + DecodeRoutedExperts.
const (
	benchSeqs, benchTokens, benchLayers, benchTopK, benchExperts = 64, 2048, 8, 8, 64
	benchTurns                                                   = 4
)

// benchRoutes are the batch's routes, sequence by sequence: distinct ids
// per layer, pseudo-random.
func benchRoutes() [][]int32 {
	out := make([][]int32, benchSeqs)
	x := uint32(12345)
	for s := range out {
		r := make([]int32, 0, benchTokens*benchLayers*benchTopK)
		for range benchTokens * benchLayers {
			x = x*1664525 + 1013904223
			base := int32(x>>8) % benchExperts
			for k := range benchTopK {
				r = append(r, (base+int32(k)*7)%benchExperts)
			}
		}
		out[s] = r
	}
	return out
}

func benchBatch(b *testing.B, routes [][]int32) *messages.TokenBatch {
	b.Helper()
	spec := messages.BatchSpec{Vocab: 151936}
	if routes != nil {
		spec.RouteLayers, spec.RouteTopK, spec.NumExperts = benchLayers, benchTopK, benchExperts
	}
	tb, err := messages.NewTokenBatch(spec)
	if err != nil {
		b.Fatal(err)
	}
	for i := range benchSeqs {
		tr := messages.Trajectory{ID: "traj-" + strconv.Itoa(i), GroupID: "g", Reward: 1, PromptLen: 256,
			TokenIDs: make([]int32, benchTokens), Logprobs: make([]float32, benchTokens),
			LossMask: make([]uint8, benchTokens), PolicyVersions: make([]int32, benchTokens)}
		if routes != nil {
			tr.Routes = routes[i]
		}
		for j := range tr.TokenIDs {
			tr.TokenIDs[j] = int32((j*31 + i) % 151936)
			tr.Logprobs[j] = -float32(j%17) / 8
			tr.LossMask[j] = uint8(min(j/256, 1))
		}
		if err := tb.Append(tr); err != nil {
			b.Fatal(err)
		}
	}
	return tb
}

func benchArrow(b *testing.B, routes [][]int32) {
	tb := benchBatch(b, routes)
	var n int
	b.ResetTimer()
	for range b.N {
		data, err := messages.EncodeTokenBatch(tb)
		if err != nil {
			b.Fatal(err)
		}
		back, err := messages.DecodeTokenBatch(data)
		if err != nil {
			b.Fatal(err)
		}
		if routes != nil && len(back.Routes.Data) != benchSeqs*benchTokens*benchLayers*benchTopK {
			b.Fatal("routes lost")
		}
		n = len(data)
	}
	b.ReportMetric(float64(n), "wire-bytes")
}

// BenchmarkR3PackedArrow is the whole token batch with its routes column;
// BenchmarkR3PackedArrowNoRoutes the same batch without it (the routes'
// share is the difference).
func BenchmarkR3PackedArrow(b *testing.B)         { benchArrow(b, benchRoutes()) }
func BenchmarkR3PackedArrowNoRoutes(b *testing.B) { benchArrow(b, nil) }

func BenchmarkR3JSONLists(b *testing.B) {
	routes := benchRoutes()
	nested := make([][][][]int32, benchSeqs)
	for s, r := range routes {
		nested[s] = make([][][]int32, benchTokens)
		for t := range nested[s] {
			nested[s][t] = make([][]int32, benchLayers)
			for l := range benchLayers {
				o := (t*benchLayers + l) * benchTopK
				nested[s][t][l] = r[o : o+benchTopK]
			}
		}
	}
	var n int
	b.ResetTimer()
	for range b.N {
		data, err := json.Marshal(nested)
		if err != nil {
			b.Fatal(err)
		}
		var back [][][][]int32
		if err := json.Unmarshal(data, &back); err != nil {
			b.Fatal(err)
		}
		flat := make([]int32, 0, benchSeqs*benchTokens*benchLayers*benchTopK)
		for _, s := range back {
			for _, t := range s {
				for _, l := range t {
					flat = append(flat, l...)
				}
			}
		}
		if len(flat) != cap(flat) {
			b.Fatal("routes lost")
		}
		n = len(data)
	}
	b.ReportMetric(float64(n), "wire-bytes")
}

// choiceBody is the part of a completion answer the turn carries.
type choiceBody struct {
	RoutedExperts *RoutedExperts `json:"routed_experts"`
}

func BenchmarkR3JSONBase64PerTurn(b *testing.B) {
	routes := benchRoutes()
	per := benchTokens / benchTurns
	stride := benchLayers * benchTopK
	var n int
	b.ResetTimer()
	for range b.N {
		n = 0
		flat := make([]int32, 0, benchSeqs*benchTokens*stride)
		for _, r := range routes {
			for turn := range benchTurns {
				rows := r[turn*per*stride : (turn+1)*per*stride]
				w, err := EncodeRoutedExperts(rows, per, benchLayers, benchTopK, benchExperts)
				if err != nil {
					b.Fatal(err)
				}
				data, err := json.Marshal(choiceBody{RoutedExperts: &w})
				if err != nil {
					b.Fatal(err)
				}
				n += len(data)
				var back choiceBody
				if err := json.Unmarshal(data, &back); err != nil {
					b.Fatal(err)
				}
				got, err := DecodeRoutedExperts(*back.RoutedExperts, benchExperts, benchLayers, benchTopK)
				if err != nil {
					b.Fatal(err)
				}
				flat = append(flat, got.Values...)
			}
		}
		if len(flat) != cap(flat) {
			b.Fatal("routes lost")
		}
	}
	b.ReportMetric(float64(n), "wire-bytes")
}
