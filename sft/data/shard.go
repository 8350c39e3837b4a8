package data

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

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
	mapping []byte
	batches []batch
	starts  []int64 // row starts of batches, len(batches)+1
	dirty   bool    // rows read since the stream last dropped the mapped pages
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
		s.batches = append(s.batches, newBatch(r, lay))
		s.starts = append(s.starts, s.starts[len(s.starts)-1]+r.NumRows())
	}
	s.loaded = true
	return nil
}

func (s *Shard) loadArrow() ([]arrow.RecordBatch, *arrow.Schema, error) {
	f, err := os.Open(s.Path)
	if err != nil {
		return nil, nil, fmt.Errorf("sft/data: %w", err)
	}
	defer f.Close()
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
	s.batches, s.starts = nil, nil
	if s.mapping != nil {
		_ = unmapFile(s.mapping)
		s.mapping = nil
	}
	s.loaded = false
}

// at finds row's batch and the row within it.
func (s *Shard) at(row int64) (*batch, int) {
	b := sort.Search(len(s.batches), func(i int) bool { return s.starts[i+1] > row })
	return &s.batches[b], int(row - s.starts[b])
}

// rowError names a bad row.
type RowError struct {
	Path string
	Row  int64
	Err  error
}

func (e *RowError) Error() string { return fmt.Sprintf("%s: row %d: %v", e.Path, e.Row, e.Err) }
func (e *RowError) Unwrap() error { return e.Err }
