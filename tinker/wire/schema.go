package wire

import (
	"fmt"
	"sync"

	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

// The schema of tinker_public.proto, package tinker_public, proto3, as the
// SDK's generated src/tinker/proto/tinker_public_pb2.py declares it
// (thinking-machines-lab/tinker d595dc2ba62a1494aa0f452fe1d0dbb7b321b870,
// 0.25.0; the same bytes at 6b025363621b57be188c843ec32171ec4094d407,
// 0.24.1). Written here by hand, field by field.

// Enum values (tinker_public.StopReason, tinker_public.DType).
const (
	StopReasonStop   = 0 // STOP_REASON_STOP
	StopReasonLength = 1 // STOP_REASON_LENGTH

	DTypeUnspecified = 0
	DTypeFloat32     = 1
	DTypeInt64       = 2
	DTypeInt32       = 3
	DTypeBFloat16    = 4
)

type fieldSpec struct {
	name     string
	num      int32
	kind     descriptorpb.FieldDescriptorProto_Type
	repeated bool
	typeName string // messages and enums, relative to the package
	oneof    *int32
	optional bool // proto3 optional (a synthetic oneof)
}

var (
	tBytes  = descriptorpb.FieldDescriptorProto_TYPE_BYTES
	tString = descriptorpb.FieldDescriptorProto_TYPE_STRING
	tMsg    = descriptorpb.FieldDescriptorProto_TYPE_MESSAGE
	tEnum   = descriptorpb.FieldDescriptorProto_TYPE_ENUM
	tInt32  = descriptorpb.FieldDescriptorProto_TYPE_INT32
	tInt64  = descriptorpb.FieldDescriptorProto_TYPE_INT64
	tUint32 = descriptorpb.FieldDescriptorProto_TYPE_UINT32
	tUint64 = descriptorpb.FieldDescriptorProto_TYPE_UINT64
	tDouble = descriptorpb.FieldDescriptorProto_TYPE_DOUBLE
	tFloat  = descriptorpb.FieldDescriptorProto_TYPE_FLOAT
	tBool   = descriptorpb.FieldDescriptorProto_TYPE_BOOL
)

func idx(i int32) *int32 { return &i }

func message(name string, fields []fieldSpec, oneofs []string, nested ...*descriptorpb.DescriptorProto) *descriptorpb.DescriptorProto {
	m := &descriptorpb.DescriptorProto{Name: &name, NestedType: nested}
	for _, f := range fields {
		label := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL
		if f.repeated {
			label = descriptorpb.FieldDescriptorProto_LABEL_REPEATED
		}
		fd := &descriptorpb.FieldDescriptorProto{Name: new(f.name), Number: new(f.num), Label: &label, Type: new(f.kind),
			OneofIndex: f.oneof}
		if f.typeName != "" {
			fd.TypeName = new(".tinker_public." + f.typeName)
		}
		if f.optional {
			fd.Proto3Optional = new(true)
		}
		m.Field = append(m.Field, fd)
	}
	for _, o := range oneofs {
		m.OneofDecl = append(m.OneofDecl, &descriptorpb.OneofDescriptorProto{Name: new(o)})
	}
	return m
}

// mapEntry is the nested <Name>Entry message of a map field.
func mapEntry(name string, val fieldSpec) *descriptorpb.DescriptorProto {
	val.name, val.num = "value", 2
	m := message(name, []fieldSpec{{name: "key", num: 1, kind: tString}, val}, nil)
	m.Options = &descriptorpb.MessageOptions{MapEntry: new(true)}
	return m
}

// SchemaProto is the schema as a FileDescriptorProto (tests compare it with
// the SDK's).
func SchemaProto() *descriptorpb.FileDescriptorProto {
	enum := func(name string, values ...string) *descriptorpb.EnumDescriptorProto {
		e := &descriptorpb.EnumDescriptorProto{Name: new(name)}
		for i, v := range values {
			e.Value = append(e.Value, &descriptorpb.EnumValueDescriptorProto{Name: new(v), Number: new(int32(i))})
		}
		return e
	}
	msgs := []*descriptorpb.DescriptorProto{
		message("SampleResponse", []fieldSpec{
			{name: "sequences", num: 1, kind: tMsg, repeated: true, typeName: "SampledSequence"},
			{name: "prompt_logprobs", num: 2, kind: tBytes, oneof: idx(0), optional: true},
			{name: "topk_prompt_logprobs", num: 3, kind: tMsg, typeName: "TopkPromptLogprobs", oneof: idx(1), optional: true},
			{name: "prompt_cache_hit_tokens", num: 4, kind: tInt32},
		}, []string{"_prompt_logprobs", "_topk_prompt_logprobs"}),
		message("SampledSequence", []fieldSpec{
			{name: "stop_reason", num: 1, kind: tEnum, typeName: "StopReason"},
			{name: "tokens", num: 2, kind: tBytes},
			{name: "logprobs", num: 3, kind: tBytes, oneof: idx(0), optional: true},
		}, []string{"_logprobs"}),
		message("TopkPromptLogprobs", []fieldSpec{
			{name: "token_ids", num: 1, kind: tBytes},
			{name: "logprobs", num: 2, kind: tBytes},
			{name: "k", num: 3, kind: tUint32},
			{name: "prompt_length", num: 4, kind: tUint32},
		}, nil),
		message("SparseCsr", []fieldSpec{
			{name: "values", num: 1, kind: tBytes},
			{name: "crow_indices", num: 2, kind: tBytes},
			{name: "col_indices", num: 3, kind: tBytes},
		}, nil),
		message("Tensor", []fieldSpec{
			{name: "dense", num: 1, kind: tBytes, oneof: idx(0)},
			{name: "sparse_csr", num: 2, kind: tMsg, typeName: "SparseCsr", oneof: idx(0)},
			{name: "dtype", num: 3, kind: tEnum, typeName: "DType"},
			{name: "shape", num: 4, kind: tInt64, repeated: true},
		}, []string{"encoding"}),
		message("BatchedTensor", []fieldSpec{
			{name: "data", num: 1, kind: tBytes},
			{name: "offsets", num: 2, kind: tBytes},
			{name: "dtype", num: 3, kind: tEnum, typeName: "DType"},
			{name: "trailing_shape", num: 4, kind: tInt64, repeated: true},
		}, nil),
		message("ArrayRecord", []fieldSpec{
			{name: "type_tag", num: 1, kind: tString},
			{name: "fields", num: 2, kind: tMsg, repeated: true, typeName: "ArrayRecord.FieldsEntry"},
			{name: "num_datums", num: 3, kind: tInt64},
		}, nil, mapEntry("FieldsEntry", fieldSpec{kind: tMsg, typeName: "BatchedTensor"})),
		message("ForwardBackwardOutput", []fieldSpec{
			{name: "loss_fn_output_type", num: 1, kind: tString},
			{name: "loss_fn_outputs", num: 2, kind: tMsg, repeated: true, typeName: "ArrayRecord"},
			{name: "metrics", num: 3, kind: tMsg, repeated: true, typeName: "ForwardBackwardOutput.MetricsEntry"},
		}, nil, mapEntry("MetricsEntry", fieldSpec{kind: tDouble})),
		message("ForwardBackwardRequest", []fieldSpec{
			{name: "model_id", num: 1, kind: tString},
			{name: "seq_id", num: 2, kind: tInt32},
			{name: "data", num: 3, kind: tMsg, repeated: true, typeName: "Datum"},
			{name: "loss_fn", num: 4, kind: tString},
			{name: "loss_fn_config", num: 5, kind: tMsg, repeated: true, typeName: "ForwardBackwardRequest.LossFnConfigEntry"},
			{name: "forward_only", num: 6, kind: tBool},
		}, nil, mapEntry("LossFnConfigEntry", fieldSpec{kind: tDouble})),
		message("Datum", []fieldSpec{
			{name: "model_input", num: 1, kind: tMsg, repeated: true, typeName: "Chunk"},
			{name: "loss_fn_inputs", num: 2, kind: tMsg, repeated: true, typeName: "Datum.LossFnInputsEntry"},
		}, nil, mapEntry("LossFnInputsEntry", fieldSpec{kind: tMsg, typeName: "Tensor"})),
		message("Chunk", []fieldSpec{
			{name: "encoded_text", num: 1, kind: tMsg, typeName: "EncodedTextChunk", oneof: idx(0)},
			{name: "image", num: 2, kind: tMsg, typeName: "ImageChunk", oneof: idx(0)},
			{name: "dmel", num: 3, kind: tMsg, typeName: "DmelChunk", oneof: idx(0)},
		}, []string{"chunk"}),
		message("EncodedTextChunk", []fieldSpec{{name: "tokens", num: 1, kind: tBytes}}, nil),
		message("ImageChunk", []fieldSpec{
			{name: "data", num: 1, kind: tBytes},
			{name: "format", num: 2, kind: tString},
			{name: "expected_tokens", num: 3, kind: tInt32, oneof: idx(0), optional: true},
		}, []string{"_expected_tokens"}),
		message("DmelChunk", []fieldSpec{{name: "dmel", num: 1, kind: tBytes}}, nil),
		message("SamplingParams", []fieldSpec{
			{name: "max_tokens", num: 1, kind: tInt32, oneof: idx(1), optional: true},
			{name: "seed", num: 2, kind: tUint64, oneof: idx(2), optional: true},
			{name: "temperature", num: 3, kind: tFloat, oneof: idx(3), optional: true},
			{name: "top_k", num: 4, kind: tInt32, oneof: idx(4), optional: true},
			{name: "top_p", num: 5, kind: tFloat, oneof: idx(5), optional: true},
			{name: "stop_strs", num: 6, kind: tMsg, typeName: "StopStrings", oneof: idx(0)},
			{name: "stop_tokens", num: 7, kind: tMsg, typeName: "StopTokens", oneof: idx(0)},
		}, []string{"stop", "_max_tokens", "_seed", "_temperature", "_top_k", "_top_p"}),
		message("StopStrings", []fieldSpec{{name: "values", num: 1, kind: tString, repeated: true}}, nil),
		message("StopTokens", []fieldSpec{{name: "values", num: 1, kind: tInt32, repeated: true}}, nil),
	}
	return &descriptorpb.FileDescriptorProto{
		Name: new("tinker_public.proto"), Package: new("tinker_public"), Syntax: new("proto3"),
		MessageType: msgs,
		EnumType: []*descriptorpb.EnumDescriptorProto{
			enum("StopReason", "STOP_REASON_STOP", "STOP_REASON_LENGTH"),
			enum("DType", "DTYPE_UNSPECIFIED", "DTYPE_FLOAT32", "DTYPE_INT64", "DTYPE_INT32", "DTYPE_BFLOAT16"),
		},
	}
}

var schema = sync.OnceValues(func() (protoreflect.FileDescriptor, error) {
	return protodesc.NewFile(SchemaProto(), nil)
})

// Schema is tinker_public.proto as a file descriptor (for dynamicpb).
func Schema() protoreflect.FileDescriptor {
	fd, err := schema()
	if err != nil {
		panic(fmt.Sprintf("wire: the hand-written tinker_public schema is invalid: %v", err)) // a bug in this file, caught by its tests
	}
	return fd
}

// Message is the descriptor of tinker_public.<name>.
func Message(name string) protoreflect.MessageDescriptor {
	md := Schema().Messages().ByName(protoreflect.Name(name))
	if md == nil {
		panic("wire: no message tinker_public." + name)
	}
	return md
}
