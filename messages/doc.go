// Package messages defines every message asyncrl actors exchange, the
// versioned wire envelope that carries them over the bus, and the Arrow IPC
// layout of packed token data.
//
// # Contract
//
//   - Every message is a concrete struct (never an interface{} payload) that
//     embeds Header (RunID, Sender, Version) and implements Message with value
//     receivers: Kind() Kind, Head() Header, String() string. String is
//     deterministic — fixed field order, sorted map keys, floats in Go's
//     shortest round-trip form, long slices cut to 8 elements plus a count —
//     so it can be used in logs and golden files.
//   - Encode/Decode (or a Codec built with NewCodec for other limits) turn a
//     message into one frame and back. DecodeAs[T] asserts the concrete type;
//     PeekKind reads only the header. Decoding never panics: truncated,
//     foreign, oversized, unknown-version, unknown-type and malformed input
//     yield errors wrapping ErrTruncated, ErrBadMagic, ErrTooLarge,
//     ErrUnknownVersion, ErrUnknownType or ErrMalformed.
//   - TokenBatch is B trajectories packed back to back (cu_seqlens offsets),
//     built with NewTokenBatch+Append and sliced with Trajectory.
//     EncodeTokenBatch/DecodeTokenBatch move it as an Arrow IPC stream;
//     decoded batches always pass Validate and own their memory.
//   - Everything here is pure: no goroutines, I/O, clocks or global state
//     beyond the immutable registry and default codec.
//
// # Frame layout
//
// Big-endian fixed header, then the payload:
//
//	offset size field
//	0      2    magic "AR" (0x41 0x52)
//	2      1    wire version, currently 1 (WireVersion)
//	3      2    message type code (Kind, see the registry in message.go)
//	5      4    payload length n
//	9      n    CBOR (RFC 8949) map with unsigned integer keys
//
// The whole frame must be exactly 9+n bytes and at most CodecConfig.MaxFrameBytes
// (default 8 MiB); bulk data belongs in a TokenBatch referenced by BatchRef.
// The decoder rejects duplicate map keys, indefinite lengths, tags, invalid
// UTF-8, nesting deeper than 16, arrays over 4M elements and maps over 64k
// pairs. Unknown keys are ignored, so a newer sender can add fields.
// Encoding is CBOR core deterministic (sorted keys, shortest integers), so
// encode(decode(frame)) is byte-stable. A Python worker speaks it with cbor2:
//
//	kind, n = struct.unpack(">HI", frame[3:9]); payload = cbor2.loads(frame[9:9+n])
//
// # Key numbering rule
//
// Integer keys and kind codes are part of the wire contract and are stable
// forever:
//
//   - keys 1..9 of every message belong to Header (1 RunID, 2 Sender,
//     3 Version; 4..9 reserved); message fields start at 10;
//   - nested structs (BatchRef, ByteRange) number their own keys from 1;
//   - a new field takes the next unused key of its struct; a removed field's
//     key is retired, never reused, and never given a different type;
//   - kind codes are grouped in blocks of 0x100 by concern (0x01xx rollout,
//     0x02xx groups/ledger, 0x03xx trainer, 0x04xx weights/versions, 0x05xx
//     engines, 0x06xx transfers); a retired code is never reused.
//
// A change that cannot follow these rules (a changed meaning of an existing
// field, a new frame layout) bumps WireVersion. testdata/wire.golden freezes
// the encoding of every kind, so an accidental renumbering fails the tests.
//
// # Token batch Arrow schema
//
// An IPC stream (schema message, exactly one record batch, optional
// end-of-stream marker; write it uncompressed — buffers that expand beyond
// twice the input size are refused) with one row per trajectory.
// Per-token columns are list columns that all share the same int32 offsets —
// the cu_seqlens [B+1], starting at 0 and ending at the total token count T.
// The encoder writes the columns in the order below with non-nullable fields
// and list children named "item"; the decoder matches columns by name, in any
// order, ignores nullability flags and child names (pyarrow's defaults are
// fine), but rejects extra columns, other types and any actual null.
//
//	column          type                                         per
//	trajectory_id   utf8                                         trajectory
//	group_id        utf8                                         trajectory
//	reward          float32                                      trajectory
//	prompt_len      int32 (0 ≤ prompt_len ≤ length)              trajectory
//	token_id        list<int32> (≥ 0, < vocab when given)        token
//	logprob         list<float32>                                token
//	loss_mask       list<uint8> (0 or 1)                         token
//	policy_version  list<int32>                                  token
//	token_reward    list<float32>                    optional    token
//	routed_experts  list<fixed_size_list<E, L·K>>    optional    token
//	sample_support  list<fixed_size_list<int32, K>>  optional    token
//
// E is uint8 when the number of experts N < 256, int16 when < 2^15, else int32; route
// values lie in [0, N). Support ids are −1 (padding) or in
// [0, vocab). Optional columns appear in the order above. Schema metadata
// (string values):
//
//	asyncrl.token_batch.version         "1" (required)
//	asyncrl.vocab_size                  vocab size, when known
//	asyncrl.routed_experts.layers       L   } all four present iff
//	asyncrl.routed_experts.top_k        K   } routed_experts is, and
//	asyncrl.routed_experts.num_experts  N   } (number of experts)
//	asyncrl.routed_experts.dtype        "uint8" | "int16" | "int32" (must match num_experts)
//	asyncrl.sample_support.k            K, present iff sample_support is
//
// Reading it with pyarrow, zero-copy into numpy:
//
//	rb = pa.ipc.open_stream(buf).read_next_batch()
//	md = rb.schema.metadata
//	cu = rb.column("token_id").offsets.to_numpy()           # cu_seqlens [B+1]
//	ids = rb.column("token_id").values.to_numpy()           # [T]
//	L, K = int(md[b"asyncrl.routed_experts.layers"]), int(md[b"asyncrl.routed_experts.top_k"])
//	routes = rb.column("routed_experts").values.values.to_numpy().reshape(-1, L, K)
//
// Decoding hostile input: Arrow's IPC reader trusts lengths in its
// flatbuffer metadata, and some of them size allocations directly (a fatal,
// unrecoverable out-of-memory). DecodeTokenBatch therefore walks the
// flatbuffer of every message itself before handing the stream to Arrow
// (refusing dictionaries and types outside the schema), caps metadata and
// body sizes at the input size (arrow-go's ipc.NewReader forgets to pass
// those limits on, so the message reader is built explicitly), routes every Arrow allocation through a budget of twice the
// input size, runs array.ValidateFull on each column before typed access,
// checks every offset and length relation (Validate), and converts any
// remaining reader panic into ErrMalformed.
package messages
