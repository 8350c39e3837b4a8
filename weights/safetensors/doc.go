// Package safetensors reads and writes the safetensors checkpoint format
// (https://github.com/huggingface/safetensors) used by vLLM, Hugging Face and
// SkyRL, including sharded checkpoints with a model.safetensors.index.json.
//
// # Format
//
// A file is an 8-byte little-endian unsigned header length N, N bytes of
// UTF-8 JSON, then the tensor data. The JSON object maps each tensor name to
// {"dtype", "shape", "data_offsets": [begin, end]} with offsets relative to
// the start of the data; an optional "__metadata__" entry maps strings to
// strings. As the reference implementation does, the writer pads the header
// with spaces so the data starts at an 8-byte aligned offset, lays tensors
// out contiguously in the order given, and the reader insists on the same:
// offsets contiguous from 0 with no gap or overlap, each tensor's byte size
// equal to product(shape) × dtype size, the data ending exactly at the end
// of the file, no duplicate names, known dtypes only.
//
// # Streaming
//
// Open/NewReader parse only the header; ReadTensor and TensorReader read one
// tensor's bytes (an io.SectionReader) without touching the others.
// StreamReader reads a file from a non-seekable stream, header first and
// then tensor by tensor in data order, and StreamWriter writes one tensor by
// tensor from a declared layout, so deltas and large checkpoints never have
// to be held in memory at once.
//
// Numeric helpers convert float32 to and from BF16 (round to nearest even,
// NaN kept quiet) and F16, widen the spec's 8-bit floats F8_E4M3 (E4M3
// "fn", torch.float8_e4m3fn) and F8_E5M2 exactly, as well as the MX
// formats' exponent-only scale F8_E8M0 (torch.float8_e8m0fnu), and encode/decode
// little-endian byte slices.
//
// Errors wrap ErrFormat (a malformed file) or ErrNotFound (a missing tensor)
// and name the tensor or field at fault.
package safetensors
