package data

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// Formats.
const (
	FormatArrow   = "arrow"
	FormatParquet = "parquet"
	FormatJSONL   = "jsonl"
)

// ErrCorrupt is wrapped by errors about a shard that cannot be read as
// its format (truncated, wrong types, offsets outside the data).
var ErrCorrupt = errors.New("sft/data: corrupt shard")

// FormatOf names a shard's format from its extension ("" if unknown).
func FormatOf(path string) string {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".arrow", ".feather", ".ipc", ".arrows":
		return FormatArrow
	case ".parquet", ".pq":
		return FormatParquet
	case ".jsonl", ".ndjson":
		return FormatJSONL
	}
	return ""
}

// Shard is one file of a dataset. Arrow IPC shards are memory-mapped and
// read in place; Parquet and JSONL shards are decoded into memory when
// first read. A Shard is not safe for concurrent use.
type Shard struct {
	Path   string
	Format string
	Index  ShardIndex

	loaded  bool
	touched bool // read through the mapping since the stream last dropped its pages
	mapping []byte
	file    *os.File   // arrow: rows are pread from it (see readRow)
	plans   []filePlan // arrow: where each batch's buffers lie in file
	batches []batch
	starts  []int64 // row starts of batches, len(batches)+1
}

// load opens the shard's data (idempotent).
func (s *Shard) load(ctx context.Context) (err error) {
	if s.loaded {
		return nil
	}
	defer func() {
		// arrow-go panics on some malformed buffers; a corrupt shard is
		// an error naming the file, never a crash.
		if r := recover(); r != nil {
			s.close()
			err = fmt.Errorf("%w: %s: %v", ErrCorrupt, s.Path, r)
		}
	}()
	var recs []arrow.RecordBatch
	var schema *arrow.Schema
	switch s.Format {
	case FormatArrow:
		recs, schema, err = s.loadArrow()
	case FormatParquet:
		recs, schema, err = s.loadParquet(ctx)
	case FormatJSONL:
		recs, schema, err = loadJSONL(s.Path)
	default:
		err = fmt.Errorf("sft/data: %s: unknown format %q (want arrow, parquet or jsonl)", s.Path, s.Format)
	}
	if err != nil {
		s.close()
		return err
	}
	lay, err := schemaLayout(schema)
	if err != nil {
		for _, r := range recs {
			r.Release()
		}
		s.close()
		return fmt.Errorf("%w: %s: %v", ErrCorrupt, s.Path, err)
	}
	s.starts = []int64{0}
	for _, r := range recs {
		b := newBatch(r, lay)
		s.batches = append(s.batches, b)
		s.starts = append(s.starts, s.starts[len(s.starts)-1]+r.NumRows())
		if s.mapping != nil && littleEndian {
			s.plans = append(s.plans, b.plan(s.mapping))
		}
	}
	s.loaded = true
	return nil
}

func (s *Shard) loadArrow() ([]arrow.RecordBatch, *arrow.Schema, error) {
	f, err := os.Open(s.Path)
	if err != nil {
		return nil, nil, fmt.Errorf("sft/data: %w", err)
	}
	s.file = f // closed by close
	st, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("sft/data: %w", err)
	}
	data, err := mapFile(f, st.Size())
	if err != nil {
		return nil, nil, fmt.Errorf("sft/data: map %s: %w", s.Path, err)
	}
	s.mapping = data
	r, err := ipc.NewMappedFileReader(data, ipc.WithAllocator(memory.NewGoAllocator()))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %s", ErrCorrupt, s.Path, diagnoseArrow(data, err))
	}
	var recs []arrow.RecordBatch
	var rows int64
	for i := 0; i < r.NumRecords(); i++ {
		rec, err := r.RecordBatch(i)
		if err != nil {
			for _, x := range recs {
				x.Release()
			}
			return nil, nil, fmt.Errorf("%w: %s: record batch %d (row %d): %v", ErrCorrupt, s.Path, i, rows, err)
		}
		rec.Retain()
		recs = append(recs, rec)
		rows += rec.NumRows()
	}
	return recs, r.Schema(), nil
}

// diagnoseArrow says where an Arrow IPC file without a readable footer
// breaks: the file format is the stream format between magic and footer,
// so the stream reader finds how many whole rows precede the damage.
func diagnoseArrow(data []byte, footerErr error) string {
	const magic = "ARROW1"
	if len(data) < 8 || string(data[:6]) != magic {
		return fmt.Sprintf("not an Arrow IPC file (no %s magic at the start): %v", magic, footerErr)
	}
	rd, err := ipc.NewReader(bytes.NewReader(data[8:]), ipc.WithAllocator(memory.NewGoAllocator()))
	if err != nil {
		return fmt.Sprintf("no footer (%v) and no readable schema (%v)", footerErr, err)
	}
	defer rd.Release()
	var rows int64
	batches := 0
	for rd.Next() {
		rows += rd.RecordBatch().NumRows()
		batches++
	}
	why := "end of data"
	if err := rd.Err(); err != nil && !errors.Is(err, io.EOF) {
		why = err.Error()
	}
	return fmt.Sprintf("truncated or damaged: no footer (%v); %d whole rows in %d record batches, then unreadable from row %d (%s)",
		footerErr, rows, batches, rows, why)
}

func (s *Shard) loadParquet(ctx context.Context) ([]arrow.RecordBatch, *arrow.Schema, error) {
	f, err := os.Open(s.Path)
	if err != nil {
		return nil, nil, fmt.Errorf("sft/data: %w", err)
	}
	defer f.Close()
	pr, err := file.NewParquetReader(f)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, s.Path, err)
	}
	defer pr.Close()
	fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{}, memory.NewGoAllocator())
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, s.Path, err)
	}
	var recs []arrow.RecordBatch
	var rows int64
	var schema *arrow.Schema
	cols := make([]int, pr.MetaData().Schema.NumColumns()) // leaf columns: all of them
	for i := range cols {
		cols[i] = i
	}
	for g := 0; g < pr.NumRowGroups(); g++ {
		tbl, err := fr.ReadRowGroups(ctx, cols, []int{g})
		if err != nil {
			for _, x := range recs {
				x.Release()
			}
			return nil, nil, fmt.Errorf("%w: %s: row group %d (row %d): %v", ErrCorrupt, s.Path, g, rows, err)
		}
		schema = tbl.Schema()
		tr := array.NewTableReader(tbl, 1<<20)
		for tr.Next() {
			rec := tr.RecordBatch()
			rec.Retain()
			recs = append(recs, rec)
			rows += rec.NumRows()
		}
		tr.Release()
		tbl.Release()
	}
	if schema == nil {
		schema, err = fr.Schema()
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, s.Path, err)
		}
	}
	return recs, schema, nil
}

func (s *Shard) close() {
	for _, b := range s.batches {
		b.rec.Release()
	}
	s.batches, s.starts, s.plans = nil, nil, nil
	if s.file != nil {
		s.file.Close()
		s.file = nil
	}
	if s.mapping != nil {
		_ = unmapFile(s.mapping)
		s.mapping = nil
	}
	s.loaded = false
}

// at finds row's batch (and its number) and the row within it.
func (s *Shard) at(row int64) (*batch, int, int) {
	b := sort.Search(len(s.batches), func(i int) bool { return s.starts[i+1] > row })
	return &s.batches[b], b, int(row - s.starts[b])
}

// littleEndian: pread rows are reinterpreted in place, which needs the
// host to share Arrow's (little-endian) byte order.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// readRow reads row i of batch bi of a memory-mapped shard with pread
// (offsets, then values, then the mask's): the stream never faults the
// mapping's pages in, so the process's RSS does not grow with the dataset
// (random reads through a file mapping each map up to 64 KiB of page
// cache into the process, and dropping them with madvise costs more than
// the reads; BENCHMARKS.md "SFT data path"). ok is false when the batch
// has no plan (nulls, other types): the caller reads through the mapping.
func (s *Shard) readRow(bi, i int, dst []int32, scratch *[]byte) (toks []int32, mask []uint8, maxID int64, ok bool, err error) {
	if bi >= len(s.plans) || s.plans[bi].offs < 0 {
		return dst, nil, 0, false, nil
	}
	p, b := s.plans[bi], &s.batches[bi]
	var ob [8]byte
	if err := preadFull(s.file, ob[:], p.offs+int64(i)*4); err != nil {
		return dst, nil, 0, true, err
	}
	lo, hi := int32(binary.LittleEndian.Uint32(ob[:4])), int32(binary.LittleEndian.Uint32(ob[4:]))
	if lo < 0 || hi < lo || int(hi) > b.valuesLen() {
		return dst, nil, 0, true, fmt.Errorf("%s offsets [%d, %d) outside the %d values", ColInputIDs, lo, hi, b.valuesLen())
	}
	n := int(hi - lo)
	if cap(*scratch) < n*p.width {
		*scratch = make([]byte, n*p.width*2)
	}
	raw := (*scratch)[:n*p.width]
	if n > 0 {
		if err := preadFull(s.file, raw, p.vals+int64(lo)*int64(p.width)); err != nil {
			return dst, nil, 0, true, err
		}
	}
	dst, maxID, err = widenTokens(dst, raw, p.width, n)
	if err != nil {
		return dst, nil, 0, true, err
	}
	if p.moffs < 0 {
		return dst, nil, maxID, true, nil
	}
	mask, err = s.readMaskRow(p, b, i, n)
	if err != nil {
		return dst, nil, 0, true, err
	}
	return dst, mask, maxID, true, nil
}

// widenTokens appends the n little-endian token ids in raw (2 or 4 bytes
// wide) to dst and returns the largest (-1 when there are none); a negative
// 4-byte id is an error.
func widenTokens(dst []int32, raw []byte, width, n int) ([]int32, int64, error) {
	maxID := int64(-1)
	if width == 2 {
		var mx uint16
		for _, v := range unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(raw))), n) {
			dst = append(dst, int32(v))
			mx = max(mx, v)
		}
		if n > 0 {
			maxID = int64(mx)
		}
		return dst, maxID, nil
	}
	mx := int32(-1)
	for _, v := range unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(raw))), n) {
		dst = append(dst, v)
		mx = max(mx, v)
		if v < 0 {
			return dst, 0, fmt.Errorf("token id %d is negative", v)
		}
	}
	return dst, int64(mx), nil
}

// readMaskRow reads row i's loss mask (n values, each 0 or 1) by plan p.
func (s *Shard) readMaskRow(p filePlan, b *batch, i, n int) ([]uint8, error) {
	var ob [8]byte
	if err := preadFull(s.file, ob[:], p.moffs+int64(i)*4); err != nil {
		return nil, err
	}
	mlo, mhi := int32(binary.LittleEndian.Uint32(ob[:4])), int32(binary.LittleEndian.Uint32(ob[4:]))
	if mlo < 0 || mhi < mlo || int(mhi) > len(b.mu8) {
		return nil, fmt.Errorf("%s offsets [%d, %d) outside the %d values", ColLossMask, mlo, mhi, len(b.mu8))
	}
	if int(mhi-mlo) != n {
		return nil, fmt.Errorf("%s has %d values, %s %d", ColLossMask, mhi-mlo, ColInputIDs, n)
	}
	mask := make([]uint8, n)
	if n > 0 {
		if err := preadFull(s.file, mask, p.mvals+int64(mlo)); err != nil {
			return nil, err
		}
	}
	for j, m := range mask {
		if m > 1 {
			return nil, fmt.Errorf("%s[%d] = %d: want 0 or 1", ColLossMask, j, m)
		}
	}
	return mask, nil
}

// rowError names a bad row.
type RowError struct {
	Path string
	Row  int64
	Err  error
}

func (e *RowError) Error() string { return fmt.Sprintf("%s: row %d: %v", e.Path, e.Row, e.Err) }
func (e *RowError) Unwrap() error { return e.Err }
