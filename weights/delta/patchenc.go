package delta

import (
	"crypto/subtle"
	"fmt"

	"github.com/klauspost/compress/zstd"
)

// xorChunk is how many bytes of a patch are XORed at a time and fed to the
// zstd encoder: small enough to stay in cache until the encoder copies it
// into its history.
const xorChunk = 256 << 10

// patchEncoder turns one tensor's XOR patch into one zstd frame without
// ever materialising the patch: it XORs the new and old bytes a chunk at a
// time into a small reused buffer and streams the chunks into a zstd
// encoder whose frame header declares the content size (Python's
// zstandard.decompress needs it). Writing the whole patch to a
// tensor-sized buffer first (then EncodeAll) cost more CPU than zstd
// itself: the patch went out to memory and came back, and a fresh buffer
// page-faulted in (BENCHMARKS.md "Delta codec vs C zstd").
//
// The frames carry no zstd content checksum (WithEncoderCRC(false)): the
// manifest's xxh3-128 of the new tensor bytes, which Apply and the Python
// receiver verify before writing a tensor back, already catches any bad
// patch, so the frame's xxhash64 was a second pass over every byte for
// nothing. Any zstd decoder reads the frames either way.
//
// A patch of at most one chunk is XORed into the chunk and compressed with
// EncodeAll as a single-segment frame instead: klauspost's stream encoder
// never writes single-segment frames, and a frame that is not one cannot
// state a content size under 256 bytes, which would leave small tensors'
// frames (a norm's weight) without one.
type patchEncoder struct {
	zw    *zstd.Encoder // streams patches larger than a chunk
	small *zstd.Encoder // EncodeAll, single segment, for the others
	chunk []byte
	out   appendWriter
}

// patchEncoders is a free list of patchEncoders, one per concurrent tensor.
type patchEncoders chan *patchEncoder

// newPatchEncoders makes n patchEncoders at the zstd level (mapped to
// klauspost's speeds by EncoderLevelFromZstd). Each encodes synchronously
// (concurrency 1): Encode's workers are the parallelism.
func newPatchEncoders(level, n int) (patchEncoders, error) {
	encs := make(patchEncoders, n)
	for range n {
		zw, err := zstd.NewWriter(nil, patchEncoderOptions(level)...)
		if err != nil {
			encs.close()
			return nil, fmt.Errorf("delta: zstd: %w", err)
		}
		small, err := zstd.NewWriter(nil, append(patchEncoderOptions(level), zstd.WithSingleSegment(true), zstd.WithZeroFrames(true))...)
		if err != nil {
			zw.Close()
			encs.close()
			return nil, fmt.Errorf("delta: zstd: %w", err)
		}
		encs <- &patchEncoder{zw: zw, small: small, chunk: make([]byte, xorChunk)}
	}
	return encs, nil
}

// patchEncoderOptions are the zstd encoder options of Encode's frames.
func patchEncoderOptions(level int) []zstd.EOption {
	return []zstd.EOption{
		zstd.WithEncoderLevel(zstd.EncoderLevelFromZstd(level)),
		zstd.WithEncoderConcurrency(1),
		zstd.WithEncoderCRC(false),
	}
}

// close releases the encoders in the list (all must have been returned).
func (p patchEncoders) close() {
	for {
		select {
		case pe := <-p:
			pe.zw.Close()
			pe.small.Close()
		default:
			return
		}
	}
}

// encode appends to dst the zstd frame of next XOR base (equal lengths)
// and returns it.
func (pe *patchEncoder) encode(dst, next, base []byte) ([]byte, error) {
	if len(next) <= len(pe.chunk) {
		n := subtle.XORBytes(pe.chunk, next, base)
		return pe.small.EncodeAll(pe.chunk[:n], dst), nil
	}
	pe.out = appendWriter(dst)
	pe.zw.ResetContentSize(&pe.out, int64(len(next)))
	for off := 0; off < len(next); off += len(pe.chunk) {
		end := min(off+len(pe.chunk), len(next))
		n := subtle.XORBytes(pe.chunk, next[off:end], base[off:end])
		if _, err := pe.zw.Write(pe.chunk[:n]); err != nil {
			return pe.out, err
		}
	}
	err := pe.zw.Close()
	out := pe.out
	pe.out = nil // do not keep the caller's buffer reachable
	return out, err
}

// appendWriter is an io.Writer that appends to a byte slice.
type appendWriter []byte

func (w *appendWriter) Write(p []byte) (int, error) {
	*w = append(*w, p...)
	return len(p), nil
}
