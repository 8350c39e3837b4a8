package data

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
)

// stateVersion is the version of a Stream's State blob.
const stateVersion = 1

// arenaTokens is the size of the blocks examples' token slices are cut
// from: one allocation per ~1M tokens instead of one per example. A block
// is freed when no example cut from it is referenced any more.
const arenaTokens = 1 << 20

// Open opens cfg's datasets and the sampler cfg.Sampler names.
func Open(ctx context.Context, cfg Config) (Stream, error) {
	return OpenWith(ctx, cfg, func(sizes []int64, weights []float64) (Sampler, error) {
		return NewSampler(cfg.Sampler, sizes, weights)
	})
}

// OpenWith is Open with a sampler of the caller's (cfg.Sampler.Kind is
// then not consulted).
func OpenWith(ctx context.Context, cfg Config, newSampler SamplerFactory) (*DataStream, error) {
	if err := cfg.validate(newSampler != nil); err != nil {
		return nil, err
	}
	s := &DataStream{cfg: cfg}
	sizes := make([]int64, len(cfg.Datasets))
	weights := make([]float64, len(cfg.Datasets))
	for i, dc := range cfg.Datasets {
		d, err := OpenDataset(ctx, dc, IndexOptions{Dir: cfg.IndexDir})
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("sft/data: dataset %q: %w", dc.Name, err)
		}
		s.sets = append(s.sets, d)
		sizes[i], weights[i] = d.Rows, dc.Weight
		if d.Rows == 0 {
			s.Close()
			return nil, fmt.Errorf("sft/data: dataset %q (%s): no rows", dc.Name, dc.Path)
		}
	}
	sm, err := newSampler(sizes, weights)
	if err != nil {
		s.Close()
		return nil, err
	}
	s.sampler = sm
	s.win, s.local = sm.(windowed)
	s.fingerprint = fingerprint(s.sets)
	return s, nil
}

// DataStream is the Stream Open returns; besides Stream it reports what
// it has read (Counts) and the datasets (Datasets).
type DataStream struct {
	cfg         Config
	sets        []*Dataset
	sampler     Sampler
	fingerprint string
	arena       []int32
	scratch     []byte
	counts      []int64
	tokens      []int64

	// A windowed sampler (block_shuffle) reads rows through the mapping:
	// touched are the shards read since the window last changed, whose
	// pages are dropped (one madvise each) when it changes again.
	win     windowed
	local   bool
	window  int64
	touched []*Shard
	// Drops counts those madvise calls (for benchmarks).
	Drops int64
}

var _ Stream = (*DataStream)(nil)

// Datasets are the open datasets, in config order.
func (s *DataStream) Datasets() []*Dataset { return s.sets }

// Counts are the examples and tokens (after truncation) yielded from each
// dataset since Open: the mixture proportions actually seen.
func (s *DataStream) Counts() (examples, tokens []int64) {
	if s.counts == nil {
		s.counts = make([]int64, len(s.sets))
		s.tokens = make([]int64, len(s.sets))
	}
	return append([]int64(nil), s.counts...), append([]int64(nil), s.tokens...)
}

// readMapped reads row i through the mapping (or decoded memory).
func (s *DataStream) readMapped(b *batch, i int) ([]int32, []uint8, int64, error) {
	if err := b.checkOffsets(i); err != nil {
		return nil, nil, 0, err
	}
	n := b.rowLen(i)
	if len(s.arena) < n {
		s.arena = make([]int32, max(arenaTokens, n))
	}
	toks, minID, maxID := b.appendIDs(s.arena[:0:n], i)
	s.arena = s.arena[n:]
	if minID < 0 {
		return nil, nil, 0, fmt.Errorf("token id %d is negative", minID)
	}
	var mask []uint8
	if ml := b.maskLen(i); ml >= 0 {
		if ml != n {
			return nil, nil, 0, fmt.Errorf("%s has %d values, %s %d", b.maskName(), ml, ColInputIDs, n)
		}
		m, bad := b.appendMask(make([]uint8, 0, n), i)
		if bad >= 0 {
			return nil, nil, 0, fmt.Errorf("%s[%d] = %d: want 0 or 1", ColLossMask, bad, m[bad])
		}
		mask = m
	}
	return toks, mask, maxID, nil
}

// Next implements Stream.
func (s *DataStream) Next(ctx context.Context) (Example, error) {
	if err := ctx.Err(); err != nil {
		return Example{}, err
	}
	p, err := s.pick()
	if err != nil {
		return Example{}, err
	}
	d := s.sets[p.Dataset]
	k, row := d.Locate(p.Index)
	sh := d.Shards[k]
	if err := sh.load(ctx); err != nil {
		return Example{}, err
	}
	if got := sh.starts[len(sh.starts)-1]; got != sh.Index.Rows {
		return Example{}, fmt.Errorf("%w: %s: %d rows, its index says %d", ErrCorrupt, sh.Path, got, sh.Index.Rows)
	}
	ex := Example{ID: ExampleID{Dataset: uint32(p.Dataset), Shard: uint32(k), Row: uint32(row)}}
	toks, mask, maxID, err := s.readExample(sh, row)
	if err != nil {
		return Example{}, err
	}
	if len(toks) == 0 {
		return Example{}, &RowError{Path: sh.Path, Row: row, Err: errors.New("empty example")}
	}
	if s.cfg.VocabSize > 0 && maxID >= int64(s.cfg.VocabSize) {
		return Example{}, &RowError{Path: sh.Path, Row: row, Err: fmt.Errorf("token id %d outside the vocabulary [0, %d)", maxID, s.cfg.VocabSize)}
	}
	ex.Tokens, ex.LossMask = toks, mask
	s.truncateAndCount(&ex, p.Dataset)
	return ex, nil
}

// pick draws the next row from the sampler, checks it names a row of the
// datasets, and drops the pages of the last window when the window moved.
func (s *DataStream) pick() (Pick, error) {
	p, err := s.sampler.Next()
	if err != nil {
		if s.local && errors.Is(err, io.EOF) {
			s.dropTouched() // the last window is done too
		}
		return p, err
	}
	if p.Dataset < 0 || p.Dataset >= len(s.sets) || p.Index < 0 || p.Index >= s.sets[p.Dataset].Rows {
		return p, fmt.Errorf("sft/data: sampler picked row %d of dataset %d, outside the datasets", p.Index, p.Dataset)
	}
	if s.local {
		if w := s.win.Window(); w != s.window {
			s.dropTouched()
			s.window = w
		}
	}
	return p, nil
}

// readExample reads row of sh: through the mapping for a windowed sampler
// (marking the shard touched), else decoded into the arena, falling back
// to the mapping when the row cannot be decoded there.
func (s *DataStream) readExample(sh *Shard, row int64) (toks []int32, mask []uint8, maxID int64, err error) {
	b, bi, i := sh.at(row)
	if len(s.arena) < 1<<16 {
		s.arena = make([]int32, arenaTokens)
	}
	ok := false
	if s.local && sh.mapping != nil {
		if !sh.touched {
			sh.touched = true
			s.touched = append(s.touched, sh)
		}
	} else {
		toks, mask, maxID, ok, err = sh.readRow(bi, i, s.arena[:0], &s.scratch)
	}
	if err != nil {
		return nil, nil, 0, fmt.Errorf("%w: %w", ErrCorrupt, &RowError{Path: sh.Path, Row: row, Err: err})
	}
	if !ok {
		if toks, mask, maxID, err = s.readMapped(b, i); err != nil {
			return nil, nil, 0, &RowError{Path: sh.Path, Row: row, Err: err}
		}
	} else if len(toks) <= len(s.arena) && len(toks) > 0 && &toks[0] == &s.arena[0] {
		s.arena = s.arena[len(toks):]
		toks = toks[:len(toks):len(toks)]
	}
	return toks, mask, maxID, nil
}

// truncateAndCount cuts ex to MaxLen and counts it against its dataset.
func (s *DataStream) truncateAndCount(ex *Example, dataset int) {
	if s.cfg.MaxLen > 0 && len(ex.Tokens) > s.cfg.MaxLen {
		ex.Tokens = ex.Tokens[:s.cfg.MaxLen]
		if ex.LossMask != nil {
			ex.LossMask = ex.LossMask[:s.cfg.MaxLen]
		}
	}
	if s.counts == nil {
		s.counts = make([]int64, len(s.sets))
		s.tokens = make([]int64, len(s.sets))
	}
	s.counts[dataset]++
	s.tokens[dataset] += int64(len(ex.Tokens))
}

type streamState struct {
	Version     int    `json:"version"`
	Fingerprint string `json:"fingerprint"`
	Sampler     []byte `json:"sampler"`
}

// State implements Stream: a versioned JSON blob with the datasets'
// fingerprint (names, shard file names, row counts) and the sampler's state.
func (s *DataStream) State() ([]byte, error) {
	st, err := s.sampler.State()
	if err != nil {
		return nil, err
	}
	return json.Marshal(streamState{Version: stateVersion, Fingerprint: s.fingerprint, Sampler: st})
}

// Restore implements Stream. The datasets must be the ones the state was
// taken over (same names, shard files and row counts).
func (s *DataStream) Restore(state []byte) error {
	var st streamState
	if err := json.Unmarshal(state, &st); err != nil {
		return fmt.Errorf("%w: %v", ErrBadState, err)
	}
	if st.Version != stateVersion {
		return fmt.Errorf("%w: version %d, this build reads %d", ErrBadState, st.Version, stateVersion)
	}
	if st.Fingerprint != s.fingerprint {
		return fmt.Errorf("%w: taken over other datasets (fingerprint %s, these are %s)", ErrBadState, st.Fingerprint, s.fingerprint)
	}
	return s.sampler.Restore(st.Sampler)
}

// dropTouched drops the mapped pages of the shards read in the last
// window: they stay in the page cache, not in the process's RSS.
func (s *DataStream) dropTouched() {
	for _, sh := range s.touched {
		if sh.mapping != nil {
			_ = dropPages(sh.mapping)
			s.Drops++
		}
		sh.touched = false
	}
	s.touched = s.touched[:0]
}

// Close implements Stream.
func (s *DataStream) Close() error {
	for _, d := range s.sets {
		d.Close()
	}
	s.sets = nil
	return nil
}

func fingerprint(sets []*Dataset) string {
	h := sha256.New()
	var buf [8]byte
	for _, d := range sets {
		fmt.Fprintf(h, "%s\x00%d\x00", d.Name, len(d.Shards))
		for _, sh := range d.Shards {
			fmt.Fprintf(h, "%s\x00", filepath.Base(sh.Path))
			binary.LittleEndian.PutUint64(buf[:], uint64(sh.Index.Rows))
			h.Write(buf[:])
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}
