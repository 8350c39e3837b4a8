package wire_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/asyncrl/asyncrl/tinker"
	"github.com/asyncrl/asyncrl/tinker/wire"
)

// fixtures lists testdata/sdk-0.25.0/*.pb (the SDK 0.25.0 encoder's bytes)
// with their 0.24.1 JSON twins (testdata/README.md says how both were made).
func fixtures(t testing.TB) map[string][]byte {
	t.Helper()
	paths, err := filepath.Glob("testdata/sdk-0.25.0/*.pb")
	if err != nil || len(paths) < 7 {
		t.Fatalf("fixtures: %v (%d)", err, len(paths))
	}
	out := map[string][]byte{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(filepath.Base(p), ".pb")] = b
	}
	return out
}

// noUnknown fails if m or any message under it holds fields the schema
// does not declare.
func noUnknown(t *testing.T, name string, m protoreflect.Message) {
	t.Helper()
	if len(m.GetUnknown()) > 0 {
		t.Errorf("%s: %s has %d bytes of fields the schema lacks", name, m.Descriptor().FullName(), len(m.GetUnknown()))
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool { noUnknown(t, name, mv.Message()); return true })
		case fd.IsList() && fd.Message() != nil:
			for i := range v.List().Len() {
				noUnknown(t, name, v.List().Get(i).Message())
			}
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			noUnknown(t, name, v.Message())
		}
		return true
	})
}

// TestSchemaReadsTheSDKBytes: every fixture the SDK's encoder wrote parses
// with the hand-written schema, leaving no field unknown — the field
// numbers and wire types agree with the SDK's.
func TestSchemaReadsTheSDKBytes(t *testing.T) {
	for name, b := range fixtures(t) {
		m := dynamicpb.NewMessage(wire.Message("ForwardBackwardRequest"))
		if err := proto.Unmarshal(b, m); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		noUnknown(t, name, m)
		if got := m.Get(m.Descriptor().Fields().ByName("model_id")).String(); got != "m-fixture" {
			t.Errorf("%s: model_id %q", name, got)
		}
	}
}

// jsonTwin reads the 0.24.1 JSON body made from the same SDK objects.
func jsonTwin(t *testing.T, name string) (tinker.ForwardBackwardRequest, bool) {
	t.Helper()
	b, err := os.ReadFile("testdata/sdk-0.24.1/" + name + ".json")
	if err != nil {
		t.Fatal(err)
	}
	var probe struct {
		ModelID string                       `json:"model_id"`
		SeqID   *int64                       `json:"seq_id"`
		FB      *tinker.ForwardBackwardInput `json:"forward_backward_input"`
		F       *tinker.ForwardBackwardInput `json:"forward_input"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		t.Fatal(err)
	}
	in, fwd := probe.FB, false
	if probe.F != nil {
		in, fwd = probe.F, true
	}
	return tinker.ForwardBackwardRequest{ModelID: probe.ModelID, SeqID: probe.SeqID, ForwardBackwardInput: in}, fwd
}

// TestDecodeEqualsTheJSONForm: each protobuf body decodes to exactly the
// request its 0.24.1 JSON twin holds (tokens, every loss input's values,
// dtype and shape, the loss and its config, seq_id, forward_only), so the
// two SDKs' calls train alike.
func TestDecodeEqualsTheJSONForm(t *testing.T) {
	for name, b := range fixtures(t) {
		got, fwd, err := wire.DecodeForwardBackward(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want, wantFwd := jsonTwin(t, name)
		if fwd != wantFwd {
			t.Errorf("%s: forward_only %v, want %v", name, fwd, wantFwd)
		}
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(want)
		if string(gj) != string(wj) {
			t.Errorf("%s:\n got %s\nwant %s", name, gj, wj)
		}
	}
}

// TestEncodeIsTheSDKsEncoding: the Go encoder (the client's protobuf mode)
// writes the SDK's bytes up to the order of map entries — the SDK's
// bytes put in canonical order by proto's deterministic marshal are ours.
func TestEncodeIsTheSDKsEncoding(t *testing.T) {
	for name, b := range fixtures(t) {
		req, fwd, err := wire.DecodeForwardBackward(b)
		if err != nil {
			t.Fatal(err)
		}
		ours, err := wire.EncodeForwardBackward(req, fwd)
		if err != nil {
			t.Fatal(err)
		}
		m := dynamicpb.NewMessage(wire.Message("ForwardBackwardRequest"))
		if err := proto.Unmarshal(b, m); err != nil {
			t.Fatal(err)
		}
		canon, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if string(canon) != string(ours) {
			t.Errorf("%s: ours %x\n canonical SDK %x", name, ours, canon)
		}
	}
}

// TestSampleResponseBytes: a known answer by hand (tag, length, stop
// reason LENGTH=1, two int32 tokens, one float32 logprob), then
// agreement with proto's own marshal of the same message and a round trip
// through the SDK-side reader.
func TestSampleResponseBytes(t *testing.T) {
	r := tinker.SampleResponse{Sequences: []tinker.SampledSequence{{StopReason: "length", Tokens: []int32{5, 6}, Logprobs: []float32{-1.5}}}}
	got, err := wire.AppendSampleResponse(nil, r)
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{0x0a, 0x12, 0x08, 0x01, 0x12, 0x08, 5, 0, 0, 0, 6, 0, 0, 0, 0x1a, 0x04, 0, 0, 0xc0, 0xbf}
	if string(got) != string(want) {
		t.Fatalf("got % x\nwant % x", got, want)
	}
	r = tinker.SampleResponse{Sequences: []tinker.SampledSequence{
		{StopReason: "stop", Tokens: []int32{3, 97, 40}, Logprobs: []float32{-0.25, -3, -1e-7}},
		{StopReason: "length", Tokens: []int32{}, Logprobs: nil},
		{StopReason: "length", Tokens: []int32{7}, Logprobs: []float32{-2}},
	}}
	got, err = wire.AppendSampleResponse(nil, r)
	if err != nil {
		t.Fatal(err)
	}
	md := wire.Message("SampleResponse")
	m := dynamicpb.NewMessage(md)
	seqs := m.Mutable(md.Fields().ByName("sequences")).List()
	sf := wire.Message("SampledSequence").Fields()
	for _, s := range r.Sequences {
		sm := seqs.NewElement().Message()
		if s.StopReason == "length" {
			sm.Set(sf.ByName("stop_reason"), protoreflect.ValueOfEnum(1))
		}
		var tb, lb []byte
		for _, x := range s.Tokens {
			tb = append(tb, byte(x), byte(x>>8), byte(x>>16), byte(x>>24))
		}
		if len(tb) > 0 {
			sm.Set(sf.ByName("tokens"), protoreflect.ValueOfBytes(tb))
		}
		if s.Logprobs != nil {
			b, _ := wire.AppendSampleResponse(nil, tinker.SampleResponse{Sequences: []tinker.SampledSequence{{StopReason: "stop", Logprobs: s.Logprobs}}})
			one := dynamicpb.NewMessage(md)
			if err := proto.Unmarshal(b, one); err != nil {
				t.Fatal(err)
			}
			lb = one.Get(md.Fields().ByName("sequences")).List().Get(0).Message().Get(sf.ByName("logprobs")).Bytes()
			sm.Set(sf.ByName("logprobs"), protoreflect.ValueOfBytes(lb))
		}
		seqs.Append(protoreflect.ValueOfMessage(sm))
	}
	ref, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if string(ref) != string(got) {
		t.Fatalf("ours % x\nproto % x", got, ref)
	}
	back, err := wire.DecodeSampleResponse(got)
	if err != nil {
		t.Fatal(err)
	}
	r.Sequences[1].Tokens = nil // empty bytes read back as no tokens
	back.Sequences[1].Tokens = nil
	if !reflect.DeepEqual(back.Sequences, r.Sequences) {
		t.Fatalf("round trip %+v\nwant %+v", back, r)
	}
	if _, err := wire.AppendSampleResponse(nil, tinker.SampleResponse{Sequences: []tinker.SampledSequence{{StopReason: "abort"}}}); err == nil {
		t.Fatal("an unknown stop reason encoded")
	}
}

// TestForwardBackwardOutputRoundTrip: outputs of several datums of
// different lengths, a float32 and an int64 field, read back by the
// SDK-side reader with the JSON form's values, dtypes and shapes; datums
// whose trailing shapes change start a new record and still read back;
// mismatched field names are refused.
func TestForwardBackwardOutputRoundTrip(t *testing.T) {
	o := tinker.ForwardBackwardOutput{LossFnOutputType: "TensorData", Metrics: map[string]float64{"loss:sum": 4.25, "a": -1}}
	for n := 1; n <= 4; n++ {
		lp := make([]float64, n)
		ids := make([]float64, n)
		for i := range lp {
			lp[i], ids[i] = -0.5*float64(i+1), float64(3+i)
		}
		o.LossFnOutputs = append(o.LossFnOutputs, tinker.LossFnOutput{
			"logprobs": {Data: lp, DType: "float32", Shape: []int{n}},
			"ids":      {Data: ids, DType: "int64", Shape: []int{n}},
		})
	}
	b, err := wire.AppendForwardBackwardOutput(nil, o)
	if err != nil {
		t.Fatal(err)
	}
	m := dynamicpb.NewMessage(wire.Message("ForwardBackwardOutput"))
	if err := proto.Unmarshal(b, m); err != nil {
		t.Fatal(err)
	}
	if ref, _ := (proto.MarshalOptions{Deterministic: true}).Marshal(m); string(ref) != string(b) {
		t.Fatalf("not in canonical order:\n ours % x\nproto % x", b, ref)
	}
	if recs := m.Get(m.Descriptor().Fields().ByName("loss_fn_outputs")).List().Len(); recs != 1 {
		t.Fatalf("%d records for one layout", recs)
	}
	back, err := wire.DecodeForwardBackwardOutput(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, o) {
		t.Fatalf("round trip\n got %+v\nwant %+v", back, o)
	}

	two := tinker.ForwardBackwardOutput{LossFnOutputType: "mod:TensorData", Metrics: map[string]float64{}, LossFnOutputs: []tinker.LossFnOutput{
		{"x": {Data: []float64{1, 2, 3, 4}, DType: "float32", Shape: []int{2, 2}}},
		{"x": {Data: []float64{5, 6}, DType: "float32", Shape: []int{1, 2}}},
		{"x": {Data: []float64{7, 8, 9}, DType: "float32", Shape: []int{1, 3}}},
	}}
	b, err = wire.AppendForwardBackwardOutput(nil, two)
	if err != nil {
		t.Fatal(err)
	}
	back, err = wire.DecodeForwardBackwardOutput(b)
	if err != nil {
		t.Fatal(err)
	}
	two.LossFnOutputType = "TensorData" // the SDK keeps what follows the last ':'
	if !reflect.DeepEqual(back, two) {
		t.Fatalf("records\n got %+v\nwant %+v", back, two)
	}
	bad := tinker.ForwardBackwardOutput{LossFnOutputs: []tinker.LossFnOutput{{"a": {DType: "float32"}}, {"b": {DType: "float32"}}}}
	if _, err := wire.AppendForwardBackwardOutput(nil, bad); err == nil {
		t.Fatal("datums with different fields encoded")
	}
}

// TestDecodeErrors: bytes that are not the message are a MalformedError;
// well-formed messages with unusable tensors or chunks are 422 field
// errors naming the datum and input.
func TestDecodeErrors(t *testing.T) {
	if _, _, err := wire.DecodeForwardBackward([]byte{0x0a, 0x05, 'a'}); !isMalformed(err) {
		t.Fatalf("truncated string: %v", err)
	}
	if _, _, err := wire.DecodeForwardBackward([]byte{0x0a, 0x02, 0xff, 0xfe}); !isMalformed(err) {
		t.Fatalf("invalid UTF-8 model_id: %v", err)
	}
	base := tinker.ForwardBackwardRequest{ModelID: "m", SeqID: new(int64(1)), ForwardBackwardInput: &tinker.ForwardBackwardInput{LossFn: "cross_entropy",
		Data: []tinker.Datum{tinker.NextTokenDatum([]int32{1, 5, 6, 7}, 0)}}}
	enc := func(mut func(m protoreflect.Message)) []byte {
		b, err := wire.EncodeForwardBackward(base, false)
		if err != nil {
			t.Fatal(err)
		}
		m := dynamicpb.NewMessage(wire.Message("ForwardBackwardRequest"))
		if err := proto.Unmarshal(b, m); err != nil {
			t.Fatal(err)
		}
		mut(m)
		out, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	weights := func(m protoreflect.Message) protoreflect.Message {
		d := m.Get(m.Descriptor().Fields().ByName("data")).List().Get(0).Message()
		return d.Get(d.Descriptor().Fields().ByName("loss_fn_inputs")).Map().Get(protoreflect.ValueOfString("weights").MapKey()).Message()
	}
	tf := wire.Message("Tensor").Fields()
	cases := map[string]struct {
		mut  func(m protoreflect.Message)
		want string
	}{
		"odd bytes": {func(m protoreflect.Message) {
			weights(m).Set(tf.ByName("dense"), protoreflect.ValueOfBytes([]byte{1, 2, 3, 4, 5}))
		}, "not a whole number"},
		"shape": {func(m protoreflect.Message) {
			weights(m).Mutable(tf.ByName("shape")).List().Append(protoreflect.ValueOfInt64(2))
		}, "shape"},
		"dtype": {func(m protoreflect.Message) {
			weights(m).Set(tf.ByName("dtype"), protoreflect.ValueOfEnum(9))
		}, "dtype 9"},
		"sparse": {func(m protoreflect.Message) {
			weights(m).Mutable(tf.ByName("sparse_csr"))
		}, "sparse"},
		"empty chunk": {func(m protoreflect.Message) {
			d := m.Get(m.Descriptor().Fields().ByName("data")).List().Get(0).Message()
			l := d.Mutable(d.Descriptor().Fields().ByName("model_input")).List()
			l.Append(protoreflect.ValueOfMessage(l.NewElement().Message()))
		}, "none of encoded_text"},
	}
	for name, c := range cases {
		_, _, err := wire.DecodeForwardBackward(enc(c.mut))
		var fe tinker.FieldErrors
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), c.want) || fe[0].Loc[1] != "data" || fe[0].Loc[2] != 0 {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func isMalformed(err error) bool {
	var me *wire.MalformedError
	return errors.As(err, &me)
}

// TestPrefersProtobuf: the Accept headers each SDK sends, and others.
func TestPrefersProtobuf(t *testing.T) {
	for accept, want := range map[string]bool{
		"application/x-protobuf":                   true, // 0.25.0
		"application/x-protobuf, application/json": true, // 0.18.1 … 0.24.1
		"":                 false,
		"application/json": false,
		"*/*":              false,
		"application/json, application/x-protobuf":       false,
		"application/x-protobuf;q=0.5, application/json": false,
		"application/json;q=0.1, application/x-protobuf": true,
		"application/x-protobuf;q=0":                     false,
		"application/x-protobuf-foo":                     false,
		"application/x-protobuf;q=bad, application/json": true,
	} {
		if got := wire.PrefersProtobuf(accept); got != want {
			t.Errorf("%q: %v, want %v", accept, got, want)
		}
	}
}

// FuzzDecodeForwardBackward: any bytes decode without a panic; what
// decodes re-encodes to a body that decodes to the same request.
func FuzzDecodeForwardBackward(f *testing.F) {
	for _, b := range fixtures(f) {
		f.Add(b)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		req, fwd, err := wire.DecodeForwardBackward(b)
		if err != nil {
			return
		}
		for _, d := range req.ForwardBackwardInput.Data {
			for _, c := range d.ModelInput.Chunks {
				if c.Type != "encoded_text" {
					return // image/dmel: read only to be refused by validation
				}
			}
		}
		again, err := wire.EncodeForwardBackward(req, fwd)
		if err != nil {
			t.Fatal(err)
		}
		req2, fwd2, err := wire.DecodeForwardBackward(again)
		if err != nil {
			t.Fatal(err)
		}
		third, err := wire.EncodeForwardBackward(req2, fwd2)
		if err != nil {
			t.Fatal(err)
		}
		if string(again) != string(third) || fwd != fwd2 {
			t.Fatalf("round trip changed the request:\n%x\n%x", again, third)
		}
	})
}
