package wire_test

import (
	"encoding/json"
	"testing"

	"github.com/asyncrl/asyncrl/tinker"
	"github.com/asyncrl/asyncrl/tinker/wire"
)

// BenchmarkReadSample: what a client pays to read a 16-token sample
// answer, JSON (encoding/json) against protobuf (the SDK-side reader),
// side by side.
func BenchmarkReadSample(b *testing.B) {
	seq := tinker.SampledSequence{StopReason: "length", Tokens: make([]int32, 16), Logprobs: make([]float32, 16)}
	for i := range seq.Tokens {
		seq.Tokens[i], seq.Logprobs[i] = int32(3+i), -1.5-float32(i)/7
	}
	r := tinker.SampleResponse{Type: "sample", Sequences: []tinker.SampledSequence{seq}}
	js, _ := json.Marshal(r)
	pb, err := wire.AppendSampleResponse(nil, r)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("json", func(b *testing.B) {
		for b.Loop() {
			var out tinker.SampleResponse
			if err := json.Unmarshal(js, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("protobuf", func(b *testing.B) {
		for b.Loop() {
			if _, err := wire.DecodeSampleResponse(pb); err != nil {
				b.Fatal(err)
			}
		}
	})
}
