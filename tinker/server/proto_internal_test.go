package server

import (
	"testing"

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
