package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/asyncrl/asyncrl/tinker"
)

// MalformedError is a body that is not a well-formed protobuf message of
// the expected type (the server answers 400).
type MalformedError struct {
	Message string // tinker_public message name
	Err     error
}

func (e *MalformedError) Error() string {
	return fmt.Sprintf("the application/x-protobuf body is not a tinker_public.%s: %v", e.Message, e.Err)
}

func (e *MalformedError) Unwrap() error { return e.Err }

// unmarshal parses b as md. The library's reflective decoder panics on some
// malformed map entries (found by FuzzDecodeForwardBackward; the input is
// kept under testdata/fuzz): that is a malformed body too, not a crash.
func unmarshal(md protoreflect.MessageDescriptor, b []byte) (m *dynamicpb.Message, err error) {
	defer func() {
		if r := recover(); r != nil {
			m, err = nil, &MalformedError{Message: string(md.Name()), Err: fmt.Errorf("%v", r)}
		}
	}()
	m = dynamicpb.NewMessage(md)
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, &MalformedError{Message: string(md.Name()), Err: err}
	}
	return m, nil
}

// DecodeForwardBackward decodes the body of a forward_backward request as
// the SDK ≥ 0.25 sends it (proto/request_conv.py
// forward_backward_request_to_proto, resources/training.py): tokens as
// int32 little-endian bytes, each loss input a Tensor of float32 or int64
// bytes with its shape, forward_only set for TrainingClient.forward. It
// returns the request in the JSON form's types, so one validation and one
// training path serve both wire forms.
func DecodeForwardBackward(body []byte) (req tinker.ForwardBackwardRequest, forwardOnly bool, err error) {
	md := Message("ForwardBackwardRequest")
	m, err := unmarshal(md, body)
	if err != nil {
		return req, false, err
	}
	f := md.Fields()
	seq := m.Get(f.ByName("seq_id")).Int()
	in := &tinker.ForwardBackwardInput{LossFn: m.Get(f.ByName("loss_fn")).String()}
	req = tinker.ForwardBackwardRequest{ModelID: m.Get(f.ByName("model_id")).String(), SeqID: &seq, ForwardBackwardInput: in}
	if cfg := m.Get(f.ByName("loss_fn_config")).Map(); cfg.Len() > 0 {
		in.LossFnConfig = make(map[string]float64, cfg.Len())
		cfg.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
			in.LossFnConfig[k.String()] = v.Float()
			return true
		})
	}
	var fe tinker.FieldErrors
	data := m.Get(f.ByName("data")).List()
	in.Data = make([]tinker.Datum, data.Len())
	for i := range data.Len() {
		in.Data[i] = decodeDatum(data.Get(i).Message(), i, &fe)
	}
	if len(fe) > 0 {
		return req, false, fe
	}
	return req, m.Get(f.ByName("forward_only")).Bool(), nil
}

func fieldErr(fe *tinker.FieldErrors, msg string, loc ...any) {
	*fe = append(*fe, tinker.FieldError{Loc: append([]any{"body"}, loc...), Msg: msg, Type: "value_error"})
}

func decodeDatum(m protoreflect.Message, i int, fe *tinker.FieldErrors) tinker.Datum {
	f := m.Descriptor().Fields()
	var d tinker.Datum
	chunks := m.Get(f.ByName("model_input")).List()
	d.ModelInput.Chunks = make([]tinker.Chunk, 0, chunks.Len())
	for j := range chunks.Len() {
		c := chunks.Get(j).Message()
		which := c.WhichOneof(c.Descriptor().Oneofs().ByName("chunk"))
		if which == nil {
			fieldErr(fe, "chunk sets none of encoded_text, image, dmel", "data", i, "model_input", j)
			continue
		}
		switch which.Name() {
		case "encoded_text":
			raw := c.Get(which).Message().Get(Message("EncodedTextChunk").Fields().ByName("tokens")).Bytes()
			if len(raw)%4 != 0 {
				fieldErr(fe, fmt.Sprintf("tokens are %d bytes, not a whole number of int32s", len(raw)), "data", i, "model_input", j, "encoded_text", "tokens")
				continue
			}
			toks := make([]int32, len(raw)/4)
			for k := range toks {
				toks[k] = int32(binary.LittleEndian.Uint32(raw[4*k:]))
			}
			d.ModelInput.Chunks = append(d.ModelInput.Chunks, tinker.Chunk{Type: "encoded_text", Tokens: toks})
		default:
			// image, dmel: the JSON path's validation names them as unsupported.
			d.ModelInput.Chunks = append(d.ModelInput.Chunks, tinker.Chunk{Type: string(which.Name())})
		}
	}
	inputs := m.Get(f.ByName("loss_fn_inputs")).Map()
	d.LossFnInputs = make(map[string]tinker.TensorData, inputs.Len())
	inputs.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
		name := k.String()
		td, err := decodeTensor(v.Message())
		if err != nil {
			fieldErr(fe, err.Error(), "data", i, "loss_fn_inputs", name)
			return true
		}
		d.LossFnInputs[name] = td
		return true
	})
	return d
}

// decodeTensor reads a Tensor as request_conv._tensor_data_to_proto writes
// it: dense bytes of the dtype (float32 or int64; int32 and bfloat16 are
// read too), and the shape when the TensorData had one.
func decodeTensor(m protoreflect.Message) (tinker.TensorData, error) {
	f := m.Descriptor().Fields()
	if m.Has(f.ByName("sparse_csr")) {
		return tinker.TensorData{}, errors.New("sparse (CSR) tensors are not supported; send the tensor dense")
	}
	raw := m.Get(f.ByName("dense")).Bytes()
	dt := int(m.Get(f.ByName("dtype")).Enum())
	var size int
	var td tinker.TensorData
	switch dt {
	case DTypeFloat32:
		size, td.DType = 4, "float32"
	case DTypeInt64:
		size, td.DType = 8, "int64"
	case DTypeInt32:
		size, td.DType = 4, "int64"
	case DTypeBFloat16:
		size, td.DType = 2, "float32"
	default:
		return td, fmt.Errorf("tensor dtype %d is not float32 (1), int64 (2), int32 (3) or bfloat16 (4)", dt)
	}
	if len(raw)%size != 0 {
		return td, fmt.Errorf("dense data is %d bytes, not a whole number of %d-byte %s values", len(raw), size, td.DType)
	}
	n := len(raw) / size
	td.Data = make([]float64, n)
	for k := range n {
		switch dt {
		case DTypeFloat32:
			td.Data[k] = float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*k:])))
		case DTypeInt64:
			td.Data[k] = float64(int64(binary.LittleEndian.Uint64(raw[8*k:])))
		case DTypeInt32:
			td.Data[k] = float64(int32(binary.LittleEndian.Uint32(raw[4*k:])))
		case DTypeBFloat16:
			td.Data[k] = float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(raw[2*k:])) << 16))
		}
	}
	shape := m.Get(f.ByName("shape")).List()
	if shape.Len() > 0 {
		td.Shape = make([]int, shape.Len())
		prod := int64(1)
		for k := range shape.Len() {
			s := shape.Get(k).Int()
			if s < 0 || s > int64(n) {
				return td, fmt.Errorf("shape %v does not fit %d values", shapeOf(shape), n)
			}
			td.Shape[k] = int(s)
			if prod *= s; prod > int64(n) {
				return td, fmt.Errorf("shape %v holds more than the data's %d values", shapeOf(shape), n)
			}
		}
		if prod != int64(n) {
			return td, fmt.Errorf("shape %v holds %d values, the data %d", shapeOf(shape), prod, n)
		}
	}
	return td, nil
}

func shapeOf(l protoreflect.List) []int64 {
	out := make([]int64, l.Len())
	for i := range out {
		out[i] = l.Get(i).Int()
	}
	return out
}
