// Package wire is the Tinker SDK's protobuf wire format (tinker ≥ 0.25):
// the schema tinker_public.proto, the decoder of the forward_backward
// request body the SDK sends as application/x-protobuf, the encoders of the
// SampleResponse and ForwardBackwardOutput answers it reads as protobuf, and
// the HTTP content negotiation the SDK relies on.
//
// Sources (thinking-machines-lab/tinker): src/tinker/proto/tinker_public_pb2.py
// (the schema, identical at d595dc2ba62a1494aa0f452fe1d0dbb7b321b870 = 0.25.0
// and 6b025363621b57be188c843ec32171ec4094d407 = 0.24.1), proto/request_conv.py
// (what the SDK writes), proto/response_conv.py (how it reads answers),
// resources/training.py and lib/api_future_impl.py (headers).
//
// Contract:
//   - Schema is written here by hand from the SDK's descriptor; field numbers,
//     types and names are the SDK's (schema_test.go pins them).
//   - DecodeForwardBackward never panics: bytes that are not a
//     ForwardBackwardRequest are a *MalformedError (the server's 400);
//     well-formed messages with unusable content (a tensor whose byte length
//     is not a multiple of its dtype, a shape that does not match, a sparse
//     tensor, a chunk with nothing in it) are tinker.FieldErrors (422) naming
//     the field.
//   - The encoders write fields in field-number order and map entries in key
//     order (what proto.Marshal with Deterministic writes), so an answer's
//     bytes are a function of its content.
//   - DecodeSampleResponse and DecodeForwardBackwardOutput read answers the
//     way the SDK's response_conv.py does (frombuffer of the packed arrays,
//     per-datum byte offsets, trailing shapes); tests and the load benchmark
//     read the server's answers with them, and the client's protobuf mode.
//
// Pure: no I/O, no goroutines.
package wire
