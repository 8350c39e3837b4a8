package wire

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/asyncrl/asyncrl/tinker"
)

// The SDK's side of the wire: how tinker ≥ 0.25 writes a forward_backward
// body and reads the answers. The server never calls these; the client's
// protobuf mode, the conformance tests and the load benchmark do. They go
// through dynamicpb and the schema, not through the encoders above, so a
// test that round-trips the server's bytes through them checks the
// encoders against the schema.

// DecodeSampleResponse reads a SampleResponse as
// response_conv.deserialize_sample_response does: an unknown stop reason
// is an error, logprobs absent or empty read as none (nil).
func DecodeSampleResponse(b []byte) (tinker.SampleResponse, error) {
	md := Message("SampleResponse")
	m, err := unmarshal(md, b)
	if err != nil {
		return tinker.SampleResponse{}, err
	}
	seqs := m.Get(md.Fields().ByName("sequences")).List()
	out := tinker.SampleResponse{Sequences: make([]tinker.SampledSequence, seqs.Len())}
	sf := Message("SampledSequence").Fields()
	for i := range seqs.Len() {
		s := seqs.Get(i).Message()
		var stop string
		switch s.Get(sf.ByName("stop_reason")).Enum() {
		case StopReasonStop:
			stop = "stop"
		case StopReasonLength:
			stop = "length"
		default:
			return out, fmt.Errorf("unknown stop_reason enum value %d in proto SampleResponse", s.Get(sf.ByName("stop_reason")).Enum())
		}
		toks, err := int32s(s.Get(sf.ByName("tokens")).Bytes())
		if err != nil {
			return out, fmt.Errorf("sequence %d tokens: %w", i, err)
		}
		var lps []float32
		if raw := s.Get(sf.ByName("logprobs")).Bytes(); len(raw) > 0 {
			if lps, err = float32s(raw); err != nil {
				return out, fmt.Errorf("sequence %d logprobs: %w", i, err)
			}
		}
		out.Sequences[i] = tinker.SampledSequence{StopReason: stop, Tokens: toks, Logprobs: lps}
	}
	return out, nil
}

// DecodeForwardBackwardOutput reads a ForwardBackwardOutput as
// response_conv.deserialize_forward_backward_output does: the output type
// after its last ':', every record's fields sliced per datum by their byte
// offsets, int32 widened to int64 and bfloat16 to float32, each datum's
// shape [len / prod(trailing), trailing...], num_datums summed over the
// records.
func DecodeForwardBackwardOutput(b []byte) (tinker.ForwardBackwardOutput, error) {
	md := Message("ForwardBackwardOutput")
	m, err := unmarshal(md, b)
	if err != nil {
		return tinker.ForwardBackwardOutput{}, err
	}
	f := md.Fields()
	out := tinker.ForwardBackwardOutput{Metrics: map[string]float64{}}
	m.Get(f.ByName("metrics")).Map().Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
		out.Metrics[k.String()] = v.Float()
		return true
	})
	typ := m.Get(f.ByName("loss_fn_output_type")).String()
	recs := m.Get(f.ByName("loss_fn_outputs")).List()
	if recs.Len() == 0 {
		if typ == "" {
			typ = "ArrayRecord"
		}
		out.LossFnOutputType, out.LossFnOutputs = typ, []tinker.LossFnOutput{}
		return out, nil
	}
	out.LossFnOutputType = typ[strings.LastIndex(typ, ":")+1:]
	rf := Message("ArrayRecord").Fields()
	type datumVal struct {
		data  []float64
		dtype string
		trail []int
	}
	perField := map[string][]datumVal{}
	var order []string
	numDatums := int64(0)
	for r := range recs.Len() {
		rec := recs.Get(r).Message()
		numDatums += rec.Get(rf.ByName("num_datums")).Int()
		var err error
		rec.Get(rf.ByName("fields")).Map().Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
			name := k.String()
			var vals [][]float64
			var dtype string
			var trail []int
			vals, dtype, trail, err = readBatched(v.Message())
			if err != nil {
				err = fmt.Errorf("record %d field %s: %w", r, name, err)
				return false
			}
			if _, seen := perField[name]; !seen {
				order = append(order, name)
			}
			for _, d := range vals {
				perField[name] = append(perField[name], datumVal{d, dtype, trail})
			}
			return true
		})
		if err != nil {
			return out, err
		}
	}
	if numDatums == 0 && len(order) > 0 {
		numDatums = int64(len(perField[order[0]]))
	}
	out.LossFnOutputs = make([]tinker.LossFnOutput, numDatums)
	for i := range out.LossFnOutputs {
		d := tinker.LossFnOutput{}
		for _, name := range order {
			vals := perField[name]
			if i >= len(vals) {
				// The SDK indexes per_datum[i] and fails here too.
				return out, fmt.Errorf("field %s has %d datums, num_datums is %d", name, len(vals), numDatums)
			}
			v := vals[i]
			te := 1
			for _, s := range v.trail {
				te *= s
			}
			lead := 0
			if te != 0 {
				lead = len(v.data) / te
			}
			d[name] = tinker.TensorData{Data: v.data, DType: v.dtype, Shape: append([]int{lead}, v.trail...)}
		}
		out.LossFnOutputs[i] = d
	}
	return out, nil
}

// readBatched slices a BatchedTensor into per-datum values
// (_decode_batched_tensor_to_per_datum_arrays).
func readBatched(m protoreflect.Message) (vals [][]float64, dtype string, trail []int, err error) {
	f := m.Descriptor().Fields()
	dt := int(m.Get(f.ByName("dtype")).Enum())
	var size int
	switch dt {
	case DTypeFloat32:
		size, dtype = 4, "float32"
	case DTypeBFloat16:
		size, dtype = 2, "float32"
	case DTypeInt64:
		size, dtype = 8, "int64"
	case DTypeInt32:
		size, dtype = 4, "int64"
	default:
		return nil, "", nil, fmt.Errorf("unsupported proto DType value: %d", dt)
	}
	data := m.Get(f.ByName("data")).Bytes()
	if len(data)%size != 0 {
		return nil, "", nil, fmt.Errorf("data is %d bytes, not whole %d-byte values", len(data), size)
	}
	offRaw := m.Get(f.ByName("offsets")).Bytes()
	if len(offRaw)%8 != 0 {
		return nil, "", nil, fmt.Errorf("offsets are %d bytes, not whole int64s", len(offRaw))
	}
	ts := m.Get(f.ByName("trailing_shape")).List()
	for i := range ts.Len() {
		trail = append(trail, int(ts.Get(i).Int()))
	}
	n := len(data) / size
	for i := 0; i+1 < len(offRaw)/8; i++ {
		start := int64(binary.LittleEndian.Uint64(offRaw[8*i:])) / int64(size)
		end := int64(binary.LittleEndian.Uint64(offRaw[8*i+8:])) / int64(size)
		if start < 0 || end < start || end > int64(n) {
			return nil, "", nil, fmt.Errorf("offsets [%d, %d) outside %d values", start, end, n)
		}
		v := make([]float64, 0, end-start)
		for k := start; k < end; k++ {
			switch dt {
			case DTypeFloat32:
				v = append(v, float64(math.Float32frombits(binary.LittleEndian.Uint32(data[4*k:]))))
			case DTypeBFloat16:
				v = append(v, float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(data[2*k:]))<<16)))
			case DTypeInt64:
				v = append(v, float64(int64(binary.LittleEndian.Uint64(data[8*k:]))))
			case DTypeInt32:
				v = append(v, float64(int32(binary.LittleEndian.Uint32(data[4*k:]))))
			}
		}
		vals = append(vals, v)
	}
	return vals, dtype, trail, nil
}

func int32s(raw []byte) ([]int32, error) {
	if len(raw)%4 != 0 {
		return nil, fmt.Errorf("%d bytes are not whole int32s", len(raw))
	}
	out := make([]int32, len(raw)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out, nil
}

func float32s(raw []byte) ([]float32, error) {
	if len(raw)%4 != 0 {
		return nil, fmt.Errorf("%d bytes are not whole float32s", len(raw))
	}
	out := make([]float32, len(raw)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out, nil
}

// EncodeForwardBackward writes req as the SDK ≥ 0.25 does
// (request_conv.forward_backward_request_to_proto, then forward_only):
// tokens as int32 bytes, each loss input dense in its dtype with its shape.
// Map entries come out in key order (deterministic); the SDK's runtime
// orders them its own way, which a decoder must not depend on.
func EncodeForwardBackward(req tinker.ForwardBackwardRequest, forwardOnly bool) ([]byte, error) {
	md := Message("ForwardBackwardRequest")
	m := dynamicpb.NewMessage(md)
	f := md.Fields()
	m.Set(f.ByName("model_id"), protoreflect.ValueOfString(req.ModelID))
	if req.SeqID != nil {
		m.Set(f.ByName("seq_id"), protoreflect.ValueOfInt32(int32(*req.SeqID)))
	}
	m.Set(f.ByName("forward_only"), protoreflect.ValueOfBool(forwardOnly))
	in := req.ForwardBackwardInput
	if in == nil {
		in = &tinker.ForwardBackwardInput{}
	}
	m.Set(f.ByName("loss_fn"), protoreflect.ValueOfString(in.LossFn))
	cfg := m.Mutable(f.ByName("loss_fn_config")).Map()
	for k, v := range in.LossFnConfig {
		cfg.Set(protoreflect.ValueOfString(k).MapKey(), protoreflect.ValueOfFloat64(v))
	}
	data := m.Mutable(f.ByName("data")).List()
	tf := Message("Tensor").Fields()
	for _, d := range in.Data {
		dm := data.NewElement().Message()
		df := dm.Descriptor().Fields()
		chunks := dm.Mutable(df.ByName("model_input")).List()
		for _, c := range d.ModelInput.Chunks {
			cm := chunks.NewElement().Message()
			et := cm.Mutable(cm.Descriptor().Fields().ByName("encoded_text")).Message()
			raw := make([]byte, 0, 4*len(c.Tokens))
			for _, t := range c.Tokens {
				raw = binary.LittleEndian.AppendUint32(raw, uint32(t))
			}
			et.Set(et.Descriptor().Fields().ByName("tokens"), protoreflect.ValueOfBytes(raw))
			chunks.Append(protoreflect.ValueOfMessage(cm))
		}
		inputs := dm.Mutable(df.ByName("loss_fn_inputs")).Map()
		for name, td := range d.LossFnInputs {
			tm := inputs.NewValue().Message()
			var raw []byte
			dt := DTypeFloat32
			if td.DType == "int64" {
				dt = DTypeInt64
				for _, v := range td.Data {
					raw = binary.LittleEndian.AppendUint64(raw, uint64(int64(v)))
				}
			} else {
				for _, v := range td.Data {
					raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(float32(v)))
				}
			}
			tm.Set(tf.ByName("dense"), protoreflect.ValueOfBytes(raw))
			tm.Set(tf.ByName("dtype"), protoreflect.ValueOfEnum(protoreflect.EnumNumber(dt)))
			sh := tm.Mutable(tf.ByName("shape")).List()
			for _, s := range td.Shape {
				sh.Append(protoreflect.ValueOfInt64(int64(s)))
			}
			inputs.Set(protoreflect.ValueOfString(name).MapKey(), protoreflect.ValueOfMessage(tm))
		}
		data.Append(protoreflect.ValueOfMessage(dm))
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(m)
}
