package delta

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/klauspost/compress/zstd"

	"github.com/asyncrl/asyncrl/weights/safetensors"
)

// VerifyPayloads checks a delta version's payload files in dir against its
// manifest without a checkpoint: every payload file parses, every tensor's
// patch is a uint8 tensor of compressed_num_bytes under its payload_key,
// and decompresses to exactly uncompressed_num_bytes. Checksums need the
// base weights and are verified by Apply.
func VerifyPayloads(ctx context.Context, man *Manifest, dir string) error {
	if err := man.Validate(); err != nil {
		return err
	}
	var maxSize int64
	for _, e := range man.Tensors {
		maxSize = max(maxSize, e.UncompressedNumBytes)
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(decoderMaxMemory(maxSize)))
	if err != nil {
		return fmt.Errorf("delta: zstd: %w", err)
	}
	defer dec.Close()
	files := map[string]*safetensors.File{}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for _, name := range man.PayloadFiles {
		f, err := safetensors.Open(filepath.Join(dir, name))
		if err != nil {
			return fmt.Errorf("%w: version %d: payload %s: %v", ErrCorrupt, man.Version, name, err)
		}
		files[name] = f
	}
	for _, e := range man.Tensors {
		if err := ctx.Err(); err != nil {
			return err
		}
		sr, info, err := files[e.PayloadFile].TensorReader(e.PayloadKey)
		if err != nil {
			return fmt.Errorf("%w: version %d: tensor %q: %v", ErrCorrupt, man.Version, e.Name, err)
		}
		if info.DType != safetensors.U8 || info.Size() != e.CompressedNumBytes {
			return fmt.Errorf("%w: version %d: tensor %q: payload is %s of %d bytes, manifest says U8 of %d", ErrCorrupt, man.Version, e.Name, info.DType, info.Size(), e.CompressedNumBytes)
		}
		comp, err := io.ReadAll(sr)
		if err != nil {
			return fmt.Errorf("%w: version %d: tensor %q: %v", ErrCorrupt, man.Version, e.Name, err)
		}
		patch, err := dec.DecodeAll(comp, make([]byte, 0, e.UncompressedNumBytes))
		if err != nil || int64(len(patch)) != e.UncompressedNumBytes {
			return fmt.Errorf("%w: version %d: tensor %q: patch decompresses to %d bytes (want %d): %v", ErrCorrupt, man.Version, e.Name, len(patch), e.UncompressedNumBytes, err)
		}
	}
	return nil
}
