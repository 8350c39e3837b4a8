package data

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// jsonlRow is one line of a pretokenized JSONL shard.
type jsonlRow struct {
	InputIDs []int64 `json:"input_ids"`
	LossMask []int64 `json:"loss_mask"`
	Labels   []int64 `json:"labels"`
}

// loadJSONL decodes a JSONL shard ({"input_ids": [...], "loss_mask"|"labels": [...]}
// per line; blank lines skipped) into one int32 record batch. A line that
// is not such an object fails naming the file, line and row.
func loadJSONL(path string) ([]arrow.RecordBatch, *arrow.Schema, error) {
	rows, hasMask, hasLabels, err := readJSONLRows(path)
	if err != nil {
		return nil, nil, err
	}
	if hasMask && hasLabels {
		return nil, nil, fmt.Errorf("%w: %s: both %s and %s: give one", ErrCorrupt, path, ColLossMask, ColLabels)
	}
	fields := []arrow.Field{{Name: ColInputIDs, Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)}}
	if hasMask {
		fields = append(fields, arrow.Field{Name: ColLossMask, Type: arrow.ListOf(arrow.PrimitiveTypes.Uint8), Nullable: true})
	}
	if hasLabels {
		fields = append(fields, arrow.Field{Name: ColLabels, Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true})
	}
	schema := arrow.NewSchema(fields, nil)
	b := array.NewRecordBuilder(memory.NewGoAllocator(), schema)
	defer b.Release()
	ids := b.Field(0).(*array.ListBuilder)
	idv := ids.ValueBuilder().(*array.Int32Builder)
	for _, r := range rows {
		ids.Append(true)
		for _, v := range r.InputIDs {
			idv.Append(int32(v))
		}
		if hasMask || hasLabels {
			src := r.LossMask
			if hasLabels {
				src = r.Labels
			}
			appendMaskRow(b.Field(1).(*array.ListBuilder), src)
		}
	}
	rec := b.NewRecordBatch()
	return []arrow.RecordBatch{rec}, schema, nil
}

// readJSONLRows decodes every non-blank line, checking each has token ids
// that fit an int32 ≥ 0, and says whether any row has a loss mask or
// labels.
func readJSONLRows(path string) (rows []jsonlRow, hasMask, hasLabels bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false, false, fmt.Errorf("sft/data: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var r jsonlRow
		dec := json.NewDecoder(bytes.NewReader(b))
		if err := dec.Decode(&r); err != nil {
			return nil, false, false, fmt.Errorf("%w: %s: line %d (row %d): %v", ErrCorrupt, path, line, len(rows), err)
		}
		if r.InputIDs == nil {
			return nil, false, false, fmt.Errorf("%w: %s: line %d (row %d): no %s", ErrCorrupt, path, line, len(rows), ColInputIDs)
		}
		for _, v := range r.InputIDs {
			if v < 0 || v > 1<<31-1 {
				return nil, false, false, fmt.Errorf("%w: %s: line %d (row %d): token id %d outside int32 ≥ 0", ErrCorrupt, path, line, len(rows), v)
			}
		}
		hasMask = hasMask || r.LossMask != nil
		hasLabels = hasLabels || r.Labels != nil
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		return nil, false, false, fmt.Errorf("%w: %s: after line %d (row %d): %v", ErrCorrupt, path, line, len(rows), err)
	}
	return rows, hasMask, hasLabels, nil
}

// appendMaskRow appends one row's loss mask (uint8) or labels (int32) to
// mb, null when the row has none.
func appendMaskRow(mb *array.ListBuilder, src []int64) {
	if src == nil {
		mb.AppendNull()
		return
	}
	mb.Append(true)
	switch vb := mb.ValueBuilder().(type) {
	case *array.Uint8Builder:
		for _, v := range src {
			// out-of-range values stay visible to validation
			vb.Append(uint8(min(max(v, 0), 255)))
		}
	case *array.Int32Builder:
		for _, v := range src {
			vb.Append(int32(v))
		}
	}
}
