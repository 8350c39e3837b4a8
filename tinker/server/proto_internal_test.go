package server

import (
	"encoding/json"
	"testing"

	"github.com/asyncrl/asyncrl/tinker"
	"github.com/asyncrl/asyncrl/tinker/wire"
)

// TestProtoResultKeepsJSONWhereTheSDKReadsJSON: a failed future, a
// try_again and another route's result stay JSON for an SDK that asked
// for protobuf (api_future_impl.py parses those as JSON by their
// Content-Type); sample and forward_backward results become protobuf
// carrying the stored values.
func TestProtoResultKeepsJSONWhereTheSDKReadsJSON(t *testing.T) {
	for _, raw := range []string{
		`{"error":"model m-1 was unloaded","category":"user"}`,
		`{"type":"try_again","request_id":"s-1","queue_state":"active"}`,
		`{"metrics":{"lr":0.01}}`,
		`{"path":"tinker://m-1/weights/a"}`,
	} {
		out, err := protoResult([]byte(raw))
		if _, ok := out.(rawJSON); !ok || err != nil {
			t.Errorf("%s became %T (%v)", raw, out, err)
		}
	}
	out, err := protoResult([]byte(`{"type":"sample","sequences":[{"stop_reason":"stop","tokens":[4,5],"logprobs":[-1,-2]}]}`))
	pb, ok := out.(rawProto)
	if !ok || err != nil {
		t.Fatalf("sample result: %T %v", out, err)
	}
	s, err := wire.DecodeSampleResponse(pb)
	if err != nil || len(s.Sequences) != 1 || s.Sequences[0].Tokens[1] != 5 || s.Sequences[0].Logprobs[1] != -2 || s.Sequences[0].StopReason != "stop" {
		t.Fatalf("sample: %+v %v", s, err)
	}
	out, err = protoResult([]byte(`{"loss_fn_output_type":"TensorData","loss_fn_outputs":[{"logprobs":{"data":[-0.5],"dtype":"float32","shape":[1]}}],"metrics":{"loss:sum":0.5}}`))
	if pb, ok = out.(rawProto); !ok || err != nil {
		t.Fatalf("forward_backward result: %T %v", out, err)
	}
	fb, err := wire.DecodeForwardBackwardOutput(pb)
	if err != nil || fb.Metrics["loss:sum"] != 0.5 || fb.LossFnOutputs[0]["logprobs"].Data[0] != -0.5 {
		t.Fatalf("forward_backward: %+v %v", fb, err)
	}
	// Datums with different fields have no protobuf form: an error the
	// shell answers as a failed future.
	_, err = protoResult([]byte(`{"loss_fn_output_type":"TensorData","loss_fn_outputs":[{"a":{"data":[1],"dtype":"float32"}},{"b":{"data":[1],"dtype":"float32"}}],"metrics":{}}`))
	if err == nil {
		t.Fatal("inconsistent outputs encoded")
	}
}

// BenchmarkRetrieveAnswer: what a retrieve_future of a finished 16-token
// sample costs the server to answer, JSON (the stored bytes as they are)
// against protobuf (decoded from the stored JSON and encoded), side by
// side; bytes/op reports the answer's size.
func BenchmarkRetrieveAnswer(b *testing.B) {
	seq := tinker.SampledSequence{StopReason: "length", Tokens: make([]int32, 16), Logprobs: make([]float32, 16)}
	for i := range seq.Tokens {
		seq.Tokens[i], seq.Logprobs[i] = int32(3+i), -1.5-float32(i)/7
	}
	raw, err := json.Marshal(tinker.SampleResponse{Type: "sample", Sequences: []tinker.SampledSequence{seq}})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("json", func(b *testing.B) {
		var n int
		for b.Loop() {
			n = len(append([]byte(nil), raw...))
		}
		b.ReportMetric(float64(n), "answer_bytes")
	})
	b.Run("protobuf", func(b *testing.B) {
		var n int
		for b.Loop() {
			out, err := protoResult(raw)
			if err != nil {
				b.Fatal(err)
			}
			n = len(out.(rawProto))
		}
		b.ReportMetric(float64(n), "answer_bytes")
	})
}
