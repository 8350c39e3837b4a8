package delta

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"sync"

	"github.com/asyncrl/asyncrl/weights/safetensors"
	"github.com/asyncrl/asyncrl/weights/store"
)

// EncodeConfig configures Encode.
type EncodeConfig struct {
	// Level is the zstd level, 1 (fastest, the default) to 22; klauspost's
	// encoder has four speeds and maps the level to the nearest (1 → fastest,
	// 2–5 → default, 6–9 → better, 10+ → best).
	Level int
	// Workers is how many tensors are diffed and compressed at once (default
	// min(4, GOMAXPROCS)). Memory grows with it: each worker holds one
	// tensor of each checkpoint, the compressed patch and a zstd encoder
	// (its 256 KiB XOR chunk and window history; the patch itself is
	// never held whole).
	Workers int
	// MaxFileSizeGB rolls payload files over once they would exceed this
	// many GiB of compressed bytes (fractions allowed). A single
	// patch larger than the limit gets a file of its own. Default 1, as
	// SkyRL's max_file_size_in_gb.
	MaxFileSizeGB float64
	// SpoolDir holds the temporary file the payload file being filled is
	// spooled to, so memory does not grow with MaxFileSizeGB (default: the
	// system temp dir).
	SpoolDir string
	// Rank is the writer's rank, part of the payload file names.
	Rank int
	// ChecksumAlgorithm is "xxh3-128" (default) or "sha256".
	ChecksumAlgorithm string
}

// DefaultEncodeConfig returns the defaults described on EncodeConfig.
func DefaultEncodeConfig() EncodeConfig {
	return EncodeConfig{
		Level:             1,
		Workers:           min(4, runtime.GOMAXPROCS(0)),
		MaxFileSizeGB:     1,
		ChecksumAlgorithm: ChecksumXXH3,
	}
}

// Validate names the first bad field.
func (c EncodeConfig) Validate() error {
	switch {
	case c.Level < 1 || c.Level > 22:
		return fmt.Errorf("delta: EncodeConfig.Level %d: want 1..22", c.Level)
	case c.Workers < 1:
		return fmt.Errorf("delta: EncodeConfig.Workers %d: want ≥ 1", c.Workers)
	case !(c.MaxFileSizeGB > 0) || math.IsInf(c.MaxFileSizeGB, 0):
		return fmt.Errorf("delta: EncodeConfig.MaxFileSizeGB %v: want > 0", c.MaxFileSizeGB)
	case c.Rank < 0 || c.Rank > 99999:
		return fmt.Errorf("delta: EncodeConfig.Rank %d: want 0..99999", c.Rank)
	case c.ChecksumAlgorithm != ChecksumXXH3 && c.ChecksumAlgorithm != ChecksumSHA256:
		return fmt.Errorf("delta: EncodeConfig.ChecksumAlgorithm %q: want %q or %q", c.ChecksumAlgorithm, ChecksumXXH3, ChecksumSHA256)
	}
	return nil
}

func (c EncodeConfig) maxFileBytes() int64 {
	b := c.MaxFileSizeGB * (1 << 30)
	if b < 1 {
		return 1
	}
	return int64(b)
}

type encoded struct {
	entry     TensorEntry
	comp      []byte
	compBuf   *[]byte // pooled backing of comp, put back once spooled
	unchanged bool
	err       error
}

// sharedNames returns the tensors both checkpoints have, and those only
// next has (skipped). A tensor only the new checkpoint has (a trainer's
// tied lm_head or a buffer the served checkpoint leaves out) is skipped, as
// SkyRL's DeltaCheckpointPublisher skips tensors absent from its base
// checkpoint; one only the base has cannot be expressed as a delta.
func sharedNames(base, next Source) (names, skipped []string, err error) {
	bn := base.Names()
	for _, n := range next.Names() {
		if _, ok := slices.BinarySearch(bn, n); ok {
			names = append(names, n)
		} else {
			skipped = append(skipped, n)
		}
	}
	if len(names) != len(bn) {
		return nil, nil, fmt.Errorf("%w: the base has %d tensors the new checkpoint lacks (first difference: %s)", ErrMismatch, len(bn)-len(names), firstDiff(bn, names))
	}
	return names, skipped, nil
}

// checkNotCommitted refuses a version whose manifest dst already holds.
func checkNotCommitted(ctx context.Context, dst store.Store, version int64) error {
	if rc, err := dst.Get(ctx, ManifestKey(version)); err == nil {
		rc.Close()
		return fmt.Errorf("delta: encode: version %d is already committed (%s)", version, ManifestKey(version))
	} else if !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("delta: encode: checking %s: %w", ManifestKey(version), err)
	}
	return nil
}

// Encode publishes version (base_version = version−1) to dst: the XOR
// patches that turn base (the checkpoint published as version−1) into next,
// cast to base's dtypes, zstd-compressed, in payload files, then
// manifest.json last via dst.Commit. Tensors are read from the sources one
// at a time by a bounded pool of workers, so two full checkpoints are never
// in memory when the sources stream from disk. Every base tensor must be in
// the new checkpoint with the same shape; a new tensor the base lacks is
// skipped and listed in Manifest.Skipped (SkyRL's publisher does the same).
// Output is deterministic: the same inputs give the same payload files and
// manifest.
//
// Encode refuses to overwrite a committed version. A failure before the
// manifest is committed leaves the version invisible (orphan payloads are
// overwritten by the next try).
func Encode(ctx context.Context, cfg EncodeConfig, base, next Source, version int64, dst store.Store) (*Manifest, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if version < 1 {
		return nil, fmt.Errorf("delta: encode: version %d: deltas start at 1 (0 is the base)", version)
	}
	names, skipped, err := sharedNames(base, next)
	if err != nil {
		return nil, err
	}
	if err := checkNotCommitted(ctx, dst, version); err != nil {
		return nil, err
	}
	encs, err := newPatchEncoders(cfg.Level, cfg.Workers)
	if err != nil {
		return nil, err
	}
	defer encs.close()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Ordered pipeline: tensor i's result lands in slots[i]; sem bounds the
	// tensors started but not yet consumed, hence memory.
	slots := make([]chan encoded, len(names))
	for i := range slots {
		slots[i] = make(chan encoded, 1)
	}
	sem := make(chan struct{}, cfg.Workers)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i, name := range names {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				pe := <-encs
				defer func() { encs <- pe }()
				slots[i] <- encodeTensor(ctx, cfg, pe, base, next, name)
			}()
		}
	}()
	defer wg.Wait() // after cancel (deferred later, runs first)
	defer cancel()

	m := &Manifest{Version: version, BaseVersion: version - 1, Tensors: []TensorEntry{}, PayloadFiles: []string{}, Skipped: skipped}
	spool, err := os.CreateTemp(cfg.SpoolDir, "asyncrl-delta-spool-*")
	if err != nil {
		return nil, fmt.Errorf("delta: spool file: %w", err)
	}
	defer func() {
		spool.Close()
		os.Remove(spool.Name())
	}()
	pw := payloadWriter{ctx: ctx, dst: dst, dir: DeltaDir(version), rank: cfg.Rank, limit: cfg.maxFileBytes(), m: m, spool: spool}
	for i := range names {
		var r encoded
		select {
		case r = <-slots[i]:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		<-sem
		if r.err != nil {
			return nil, r.err
		}
		if r.unchanged {
			continue
		}
		err := pw.add(r.entry, r.comp)
		putBuf(r.compBuf)
		if err != nil {
			return nil, err
		}
	}
	if err := pw.flush(); err != nil {
		return nil, err
	}
	js, err := m.Marshal()
	if err != nil {
		return nil, err
	}
	if err := dst.Commit(ctx, ManifestKey(version), js); err != nil {
		return nil, fmt.Errorf("delta: commit version %d: %w", version, err)
	}
	return m, nil
}

func firstDiff(a, b []string) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("%q vs %q", a[i], b[i])
		}
	}
	if len(a) > len(b) {
		return fmt.Sprintf("%q only in base", a[len(b)])
	}
	if len(b) > len(a) {
		return fmt.Sprintf("%q only in new", b[len(a)])
	}
	return "none"
}

func encodeTensor(ctx context.Context, cfg EncodeConfig, pe *patchEncoder, base, next Source, name string) encoded {
	if err := ctx.Err(); err != nil {
		return encoded{err: err}
	}
	nb, ni, err := next.ReadTensor(name)
	if err != nil {
		return encoded{err: fmt.Errorf("delta: new checkpoint: %w", err)}
	}
	bb, bi, err := base.ReadTensor(name)
	if err != nil {
		return encoded{err: fmt.Errorf("delta: base checkpoint: %w", err)}
	}
	if !slices.Equal(ni.Shape, bi.Shape) {
		return encoded{err: fmt.Errorf("%w: tensor %q: shape %v in base, %v in new", ErrMismatch, name, bi.Shape, ni.Shape)}
	}
	if nb, err = castTo(nb, ni.DType, bi.DType); err != nil {
		return encoded{err: fmt.Errorf("%w: tensor %q: %v", ErrMismatch, name, err)}
	}
	if bytes.Equal(nb, bb) {
		return encoded{unchanged: true}
	}
	sum, err := Checksum(cfg.ChecksumAlgorithm, nb)
	if err != nil {
		return encoded{err: err}
	}
	// The compressed patch goes to a pooled buffer (appended to from
	// [:0], so it needs no zeroing).
	compBuf := getBuf(len(nb)/16 + 64)
	comp, err := pe.encode((*compBuf)[:0], nb, bb)
	*compBuf = comp // keep the grown backing array if append reallocated
	if err != nil {
		putBuf(compBuf)
		return encoded{err: fmt.Errorf("delta: zstd: tensor %q: %w", name, err)}
	}
	return encoded{
		entry: TensorEntry{
			Name:                 name,
			DType:                TorchDTypeName(bi.DType),
			Shape:                append([]int64{}, bi.Shape...),
			UncompressedNumBytes: int64(len(nb)),
			CompressedNumBytes:   int64(len(comp)),
			PayloadKey:           name,
			Checksum:             sum,
			ChecksumAlgorithm:    cfg.ChecksumAlgorithm,
		},
		comp:    comp,
		compBuf: compBuf,
	}
}

// payloadWriter fills payload files in order and uploads each when full.
// Compressed patches are spooled to a temporary file until their payload
// file is complete (the safetensors header, which comes first, needs every
// size).
type payloadWriter struct {
	ctx   context.Context
	dst   store.Store
	dir   string
	rank  int
	limit int64
	m     *Manifest
	spool *os.File

	entries []TensorEntry
	size    int64
}

func (p *payloadWriter) add(e TensorEntry, comp []byte) error {
	if len(p.entries) > 0 && p.size+int64(len(comp)) > p.limit {
		if err := p.flush(); err != nil {
			return err
		}
	}
	if _, err := p.spool.WriteAt(comp, p.size); err != nil {
		return fmt.Errorf("delta: spool: %w", err)
	}
	p.entries = append(p.entries, e)
	p.size += int64(len(comp))
	return nil
}

func (p *payloadWriter) flush() error {
	if len(p.entries) == 0 {
		return nil
	}
	name := PayloadFileName(p.rank, len(p.m.PayloadFiles))
	specs := make([]safetensors.Spec, len(p.entries))
	for i, e := range p.entries {
		specs[i] = safetensors.Spec{Name: e.PayloadKey, DType: safetensors.U8, Shape: []int64{e.CompressedNumBytes}}
	}
	// The header goes to a buffer; the data section is the spooled patches
	// back to back (safetensors lays tensors out contiguously in declared
	// order), streamed to the store from the spool file.
	var hdr bytes.Buffer
	if _, err := safetensors.NewStreamWriter(&hdr, specs, nil); err != nil {
		return fmt.Errorf("delta: payload %s: %w", name, err)
	}
	r := newConcat(bytes.NewReader(hdr.Bytes()), int64(hdr.Len()), p.spool, p.size)
	if err := p.dst.Put(p.ctx, p.dir+"/"+name, r, r.size); err != nil {
		return fmt.Errorf("delta: upload %s/%s: %w", p.dir, name, err)
	}
	for _, e := range p.entries {
		e.PayloadFile = name
		p.m.Tensors = append(p.m.Tensors, e)
		p.m.TotalUncompressedNumBytes += e.UncompressedNumBytes
		p.m.TotalCompressedNumBytes += e.CompressedNumBytes
	}
	p.m.PayloadFiles = append(p.m.PayloadFiles, name)
	p.entries, p.size = nil, 0
	if err := p.spool.Truncate(0); err != nil {
		return fmt.Errorf("delta: spool: %w", err)
	}
	return nil
}

// concat reads two io.ReaderAt sections back to back and can seek, so a
// retrying store can rewind it.
type concat struct {
	a, b   io.ReaderAt
	na, nb int64
	size   int64
	off    int64
}

func newConcat(a io.ReaderAt, na int64, b io.ReaderAt, nb int64) *concat {
	return &concat{a: a, b: b, na: na, nb: nb, size: na + nb}
}

func (c *concat) Read(p []byte) (int, error) {
	if c.off >= c.size {
		return 0, io.EOF
	}
	var n int
	var err error
	if c.off < c.na {
		n, err = c.a.ReadAt(p[:min(int64(len(p)), c.na-c.off)], c.off)
	} else {
		n, err = c.b.ReadAt(p[:min(int64(len(p)), c.size-c.off)], c.off-c.na)
	}
	c.off += int64(n)
	if err == io.EOF && n > 0 {
		err = nil // the section may end exactly at the end of its reader
	}
	return n, err
}

func (c *concat) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += c.off
	case io.SeekEnd:
		offset += c.size
	}
	if offset < 0 {
		return 0, errors.New("delta: seek before start")
	}
	c.off = offset
	return offset, nil
}
