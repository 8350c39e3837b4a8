package delta

import (
	"context"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"

	"github.com/klauspost/compress/zstd"

	"github.com/asyncrl/asyncrl/weights/safetensors"
	"golang.org/x/sync/errgroup"
)

// Mutable is a checkpoint directory opened for patching in place: each
// tensor's bytes are overwritten at their offset in their shard file, so
// applying a delta never rewrites unchanged tensors or needs a second copy.
type Mutable struct {
	dir     string
	files   []*os.File
	tensors map[string]mutTensor
	names   []string
}

type mutTensor struct {
	f    *os.File
	off  int64 // absolute offset of the tensor's first byte in f
	info safetensors.TensorInfo
}

// OpenMutable opens the checkpoint in dir (single file or sharded) for
// reading and writing.
func OpenMutable(dir string) (*Mutable, error) {
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("delta: open checkpoint %s: %w", dir, err)
	}
	defer ck.Close()
	m := &Mutable{dir: dir, tensors: map[string]mutTensor{}, names: ck.Names()}
	for _, shard := range ck.Shards() {
		f, err := os.OpenFile(filepath.Join(dir, shard), os.O_RDWR, 0)
		if err != nil {
			m.Close()
			return nil, fmt.Errorf("delta: %w", err)
		}
		m.files = append(m.files, f)
		var lenBuf [8]byte
		if _, err := f.ReadAt(lenBuf[:], 0); err != nil {
			m.Close()
			return nil, fmt.Errorf("delta: %s: %w", shard, err)
		}
		dataStart := 8 + int64(binary.LittleEndian.Uint64(lenBuf[:]))
		sf, err := safetensors.Open(filepath.Join(dir, shard))
		if err != nil {
			m.Close()
			return nil, err
		}
		sf.Close()
		for _, t := range sf.Tensors {
			m.tensors[t.Name] = mutTensor{f: f, off: dataStart + t.Begin, info: t}
		}
	}
	return m, nil
}

// Dir is the checkpoint directory.
func (m *Mutable) Dir() string { return m.dir }

// Names returns the tensor names, sorted.
func (m *Mutable) Names() []string { return m.names }

// ReadTensor reads one tensor's current bytes (Mutable is also a Source).
func (m *Mutable) ReadTensor(name string) ([]byte, safetensors.TensorInfo, error) {
	t, ok := m.tensors[name]
	if !ok {
		return nil, safetensors.TensorInfo{}, fmt.Errorf("%w: %q", safetensors.ErrNotFound, name)
	}
	b := make([]byte, t.info.Size())
	if _, err := t.f.ReadAt(b, t.off); err != nil {
		return nil, t.info, fmt.Errorf("delta: read %q: %w", name, err)
	}
	return b, t.info, nil
}

// Sync flushes every shard to stable storage.
func (m *Mutable) Sync() error {
	var errs []error
	for _, f := range m.files {
		errs = append(errs, f.Sync())
	}
	return errors.Join(errs...)
}

// Close closes the shards.
func (m *Mutable) Close() error {
	var errs []error
	for _, f := range m.files {
		errs = append(errs, f.Close())
	}
	m.files = nil
	return errors.Join(errs...)
}

// ApplyConfig configures Apply.
type ApplyConfig struct {
	// Workers is how many tensors are patched at once (default
	// min(4, GOMAXPROCS)).
	Workers int
}

// DefaultApplyConfig returns the defaults.
func DefaultApplyConfig() ApplyConfig { return ApplyConfig{Workers: min(4, runtime.GOMAXPROCS(0))} }

// Validate names the first bad field.
func (c ApplyConfig) Validate() error {
	if c.Workers < 1 {
		return fmt.Errorf("delta: ApplyConfig.Workers %d: want ≥ 1", c.Workers)
	}
	return nil
}

// ApplyResult says what Apply did.
type ApplyResult struct {
	// Patched is the number of tensors XOR-patched and verified.
	Patched int
	// Skipped lists (sorted) the manifest's tensors the local checkpoint
	// lacks. They are skipped instead of failing the version: real
	// checkpoints leave tied weights (lm_head tied to the embedding) and
	// buffers out of their safetensors files while a trainer's state dict
	// has them, and SkyRL's publisher skips such tensors with a warning
	// (delta_checkpoint.py, DeltaCheckpointPublisher._publish_local,
	// skipped_tensors). The caller warns and counts them.
	Skipped []string
}

// Apply patches ck in place with the delta whose manifest is man and whose
// payload files are in payloadDir: for each tensor it decompresses the
// patch, XORs it into the current bytes, verifies the new bytes' checksum
// and writes them back, then syncs. A tensor whose checksum does not match
// is not written and Apply returns ErrChecksum; tensors patched before the
// failure stay patched, so the caller must treat ck as dirty (the receiver
// resets it from the base). Apply checks the manifest against ck (dtypes,
// shapes) before touching anything; a tensor the checkpoint lacks is
// skipped and listed in ApplyResult.Skipped (a tensor it has with another
// dtype or shape is ErrMismatch). Version chaining is the caller's business.
func Apply(ctx context.Context, cfg ApplyConfig, man *Manifest, payloadDir string, ck *Mutable) (ApplyResult, error) {
	var res ApplyResult
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	if err := man.Validate(); err != nil {
		return res, err
	}
	var maxSize int64
	todo := make([]TensorEntry, 0, len(man.Tensors))
	for _, e := range man.Tensors {
		t, ok := ck.tensors[e.Name]
		if !ok {
			res.Skipped = append(res.Skipped, e.Name)
			continue
		}
		dt, _ := NormalizeDType(e.DType)
		if dt != t.info.DType || !slices.Equal(e.Shape, t.info.Shape) {
			return res, fmt.Errorf("%w: version %d: tensor %q is %s%v in the manifest, %s%v in the checkpoint", ErrMismatch, man.Version, e.Name, dt, e.Shape, t.info.DType, t.info.Shape)
		}
		maxSize = max(maxSize, e.UncompressedNumBytes)
		todo = append(todo, e)
	}
	slices.Sort(res.Skipped)
	payloads := map[string]*safetensors.File{}
	defer func() {
		for _, f := range payloads {
			f.Close()
		}
	}()
	for _, name := range man.PayloadFiles {
		f, err := safetensors.Open(filepath.Join(payloadDir, name))
		if err != nil {
			return res, fmt.Errorf("%w: version %d: payload %s: %v", ErrCorrupt, man.Version, name, err)
		}
		payloads[name] = f
	}
	dec, err := zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(cfg.Workers),
		zstd.WithDecoderMaxMemory(decoderMaxMemory(maxSize)))
	if err != nil {
		return res, fmt.Errorf("delta: zstd: %w", err)
	}
	defer dec.Close()

	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(cfg.Workers)
	var mu sync.Mutex
	var bad []error
	for _, e := range todo {
		g.Go(func() error {
			if err := gctx.Err(); err != nil {
				return err
			}
			err := applyTensor(dec, man.Version, e, payloads[e.PayloadFile], ck.tensors[e.Name])
			if errors.Is(err, ErrChecksum) {
				// Keep going: report every bad tensor, not just the first.
				mu.Lock()
				bad = append(bad, err)
				mu.Unlock()
				return nil
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return res, err
	}
	if len(bad) > 0 {
		return res, errors.Join(bad...)
	}
	if err := ck.Sync(); err != nil {
		return res, fmt.Errorf("delta: sync checkpoint: %w", err)
	}
	res.Patched = len(todo)
	return res, nil
}

// maxPatchWindow is the largest window our encoder writes into a frame
// (klauspost's default, 8 MiB, which no level exceeds); a libzstd level-1
// frame (SkyRL's) stays below it too.
const maxPatchWindow = 8 << 20

// decoderMaxMemory bounds a patch decoder's memory: the largest patch or
// the frame's window, whichever is larger, plus slack. A streamed frame
// declares its encoder's window even when the tensor is smaller: bounded
// by the largest patch alone, a 2 MiB tensor's frame was refused ("window
// size exceeded").
func decoderMaxMemory(maxPatch int64) uint64 {
	return uint64(max(maxPatch, maxPatchWindow)) + 1<<20
}

func applyTensor(dec *zstd.Decoder, version int64, e TensorEntry, pf *safetensors.File, t mutTensor) error {
	sr, info, err := pf.TensorReader(e.PayloadKey)
	if err != nil {
		return fmt.Errorf("%w: version %d: tensor %q: payload key %q in %s: %v", ErrCorrupt, version, e.Name, e.PayloadKey, e.PayloadFile, err)
	}
	if info.Size() != e.CompressedNumBytes {
		return fmt.Errorf("%w: version %d: tensor %q: %d compressed bytes in %s, manifest says %d", ErrCorrupt, version, e.Name, info.Size(), e.PayloadFile, e.CompressedNumBytes)
	}
	// Scratch from the pool (every byte is overwritten before use).
	compBuf := getBuf(int(info.Size()))
	defer putBuf(compBuf)
	comp := *compBuf
	if _, err := io.ReadFull(sr, comp); err != nil {
		return fmt.Errorf("%w: version %d: tensor %q: %v", ErrCorrupt, version, e.Name, err)
	}
	patchBuf := getBuf(int(e.UncompressedNumBytes))
	defer putBuf(patchBuf) // the pointer is fixed; *patchBuf is updated below
	patch, err := dec.DecodeAll(comp, (*patchBuf)[:0])
	*patchBuf = patch
	if err != nil {
		return fmt.Errorf("%w: version %d: tensor %q: zstd: %v", ErrCorrupt, version, e.Name, err)
	}
	if int64(len(patch)) != e.UncompressedNumBytes {
		return fmt.Errorf("%w: version %d: tensor %q: patch is %d bytes, want %d", ErrCorrupt, version, e.Name, len(patch), e.UncompressedNumBytes)
	}
	curBuf := getBuf(len(patch))
	defer putBuf(curBuf)
	cur := *curBuf
	if _, err := t.f.ReadAt(cur, t.off); err != nil {
		return fmt.Errorf("delta: read %q: %w", e.Name, err)
	}
	subtle.XORBytes(cur, cur, patch)
	sum, err := Checksum(e.ChecksumAlgorithm, cur)
	if err != nil {
		return err
	}
	if sum != e.Checksum {
		return fmt.Errorf("%w: version %d: tensor %q: %s %s, manifest says %s", ErrChecksum, version, e.Name, e.ChecksumAlgorithm, sum, e.Checksum)
	}
	if _, err := t.f.WriteAt(cur, t.off); err != nil {
		return fmt.Errorf("delta: write %q: %w", e.Name, err)
	}
	return nil
}
