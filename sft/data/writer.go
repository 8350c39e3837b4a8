package data

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// ShardOptions says how WriteShard / CreateShard lay a shard out.
type ShardOptions struct {
	Format       string // arrow | parquet | jsonl
	IDsType      string // int32 | uint16 (arrow, parquet); "" = int32
	Mask         bool   // write a loss_mask column
	RowsPerBatch int    // record batch / row group size; 0 = 65536
}

// ShardWriter writes one shard: rows go to a temporary file renamed into
// place by Close, so a shard path never holds half a shard.
type ShardWriter struct {
	path, tmp string
	opt       ShardOptions
	f         *os.File
	schema    *arrow.Schema
	ipcw      *ipc.FileWriter
	pqw       *pqarrow.FileWriter
	jw        *bufio.Writer
	offs      []int32
	ids       []int32
	mask      []uint8
	Rows      int64
	Tokens    int64
}

// CreateShard starts writing a shard at path.
func CreateShard(path string, opt ShardOptions) (*ShardWriter, error) {
	if opt.RowsPerBatch <= 0 {
		opt.RowsPerBatch = 1 << 16
	}
	if opt.IDsType == "" {
		opt.IDsType = "int32"
	}
	if opt.IDsType != "int32" && opt.IDsType != "uint16" {
		return nil, fmt.Errorf("sft/data: ids type %q: want int32 or uint16", opt.IDsType)
	}
	w := &ShardWriter{path: path, tmp: path + ".tmp", opt: opt, offs: []int32{0}}
	f, err := os.Create(w.tmp)
	if err != nil {
		return nil, fmt.Errorf("sft/data: %w", err)
	}
	w.f = f
	idsType := arrow.DataType(arrow.PrimitiveTypes.Int32)
	if opt.IDsType == "uint16" {
		idsType = arrow.PrimitiveTypes.Uint16
	}
	fields := []arrow.Field{{Name: ColInputIDs, Type: arrow.ListOf(idsType)}}
	if opt.Mask {
		fields = append(fields, arrow.Field{Name: ColLossMask, Type: arrow.ListOf(arrow.PrimitiveTypes.Uint8)})
	}
	w.schema = arrow.NewSchema(fields, nil)
	switch opt.Format {
	case FormatArrow:
		w.ipcw, err = ipc.NewFileWriter(f, ipc.WithSchema(w.schema), ipc.WithAllocator(memory.NewGoAllocator()))
	case FormatParquet:
		props := parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Snappy), parquet.WithMaxRowGroupLength(int64(opt.RowsPerBatch)))
		w.pqw, err = pqarrow.NewFileWriter(w.schema, f, props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	case FormatJSONL:
		w.jw = bufio.NewWriterSize(f, 1<<20)
	default:
		err = fmt.Errorf("format %q: want arrow, parquet or jsonl", opt.Format)
	}
	if err != nil {
		f.Close()
		os.Remove(w.tmp)
		return nil, fmt.Errorf("sft/data: %s: %w", path, err)
	}
	return w, nil
}

// Append adds one row; mask must be nil or as long as ids (and given iff
// the shard has a mask column).
func (w *ShardWriter) Append(ids []int32, mask []uint8) error {
	if w.opt.Mask != (mask != nil) || (mask != nil && len(mask) != len(ids)) {
		return fmt.Errorf("sft/data: %s: row %d: mask of %d for %d ids (shard mask column: %v)", w.path, w.Rows, len(mask), len(ids), w.opt.Mask)
	}
	if w.jw != nil {
		b, err := json.Marshal(jsonlOut{InputIDs: ids, LossMask: maskInts(mask)})
		if err != nil {
			return err
		}
		w.jw.Write(b)
		w.jw.WriteByte('\n')
	} else {
		w.ids = append(w.ids, ids...)
		w.offs = append(w.offs, int32(len(w.ids)))
		w.mask = append(w.mask, mask...)
	}
	w.Rows++
	w.Tokens += int64(len(ids))
	if len(w.offs)-1 >= w.opt.RowsPerBatch || len(w.ids) >= 1<<28 {
		return w.flush()
	}
	return nil
}

type jsonlOut struct {
	InputIDs []int32 `json:"input_ids"`
	LossMask []int   `json:"loss_mask,omitempty"`
}

func maskInts(m []uint8) []int {
	if m == nil {
		return nil
	}
	out := make([]int, len(m))
	for i, v := range m {
		out[i] = int(v)
	}
	return out
}

// flush writes the buffered rows as one record batch.
func (w *ShardWriter) flush() error {
	n := len(w.offs) - 1
	if n == 0 || w.jw != nil {
		return nil
	}
	listOf := func(elem arrow.DataType, values []byte, count int) arrow.ArrayData {
		vals := array.NewData(elem, count, []*memory.Buffer{nil, memory.NewBufferBytes(values)}, nil, 0, 0)
		return array.NewData(arrow.ListOf(elem), n, []*memory.Buffer{nil, memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(w.offs))}, []arrow.ArrayData{vals}, 0, 0)
	}
	var idsData arrow.ArrayData
	if w.opt.IDsType == "uint16" {
		u := make([]uint16, len(w.ids))
		for i, v := range w.ids {
			if v < 0 || v > 0xffff {
				return fmt.Errorf("sft/data: %s: token id %d does not fit uint16", w.path, v)
			}
			u[i] = uint16(v)
		}
		idsData = listOf(arrow.PrimitiveTypes.Uint16, arrow.Uint16Traits.CastToBytes(u), len(u))
	} else {
		idsData = listOf(arrow.PrimitiveTypes.Int32, arrow.Int32Traits.CastToBytes(w.ids), len(w.ids))
	}
	cols := []arrow.Array{array.MakeFromData(idsData)}
	if w.opt.Mask {
		cols = append(cols, array.MakeFromData(listOf(arrow.PrimitiveTypes.Uint8, w.mask, len(w.mask))))
	}
	rec := array.NewRecordBatch(w.schema, cols, int64(n))
	var err error
	if w.ipcw != nil {
		err = w.ipcw.Write(rec)
	} else {
		err = w.pqw.WriteBuffered(rec)
	}
	rec.Release()
	for _, c := range cols {
		c.Release()
	}
	w.offs, w.ids, w.mask = []int32{0}, w.ids[:0:0], w.mask[:0:0]
	if err != nil {
		return fmt.Errorf("sft/data: %s: %w", w.path, err)
	}
	return nil
}

// Close writes what is buffered and the footer and renames the shard into
// place; on any error the temporary file is removed.
func (w *ShardWriter) Close() error {
	err := w.flush()
	switch {
	case w.ipcw != nil:
		err = firstErr(err, w.ipcw.Close())
	case w.pqw != nil:
		err = firstErr(err, w.pqw.Close())
	case w.jw != nil:
		err = firstErr(err, w.jw.Flush())
	}
	if w.pqw == nil { // pqarrow's Close closes the file
		err = firstErr(err, w.f.Close())
	}
	if err == nil {
		err = os.Rename(w.tmp, w.path)
	}
	if err != nil {
		os.Remove(w.tmp)
		return fmt.Errorf("sft/data: %s: %w", w.path, err)
	}
	return nil
}

func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
