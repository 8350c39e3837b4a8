package data

import (
	"context"
	"fmt"
	"strings"
)

// ValidateOptions are the checks Validate makes beyond the structure.
type ValidateOptions struct {
	Format    string // "" = by extension
	VocabSize int    // ids must be < VocabSize; 0 = not checked
	// VocabFrom says where VocabSize came from (a tokenizer.json or
	// config.json path, "--vocab"); the report repeats it.
	VocabFrom string
	MaxLen    int // rows longer are bad; 0 = not checked
	MaxBad    int // bad rows listed (all are counted); 0 = 20
	// Progress, if set, is called after each chunk (record batch) with the
	// rows checked so far in the current shard and the shard's path.
	Progress func(path string, rowsDone int64)
}

// BadRow is one row that failed validation. Row is -1 when the whole
// shard is unreadable before any row (no schema, wrong column type).
type BadRow struct {
	Path   string `json:"path"`
	Row    int64  `json:"row"`
	Reason string `json:"reason"`
}

func (b BadRow) String() string {
	if b.Row < 0 {
		return fmt.Sprintf("%s: %s", b.Path, b.Reason)
	}
	return fmt.Sprintf("%s: row %d: %s", b.Path, b.Row, b.Reason)
}

// ValidationReport is what Validate found.
type ValidationReport struct {
	Shards     int      `json:"shards"`
	BadShards  int      `json:"bad_shards"`
	Rows       int64    `json:"rows"`
	Tokens     int64    `json:"tokens"`
	BadRows    int64    `json:"bad_rows"`
	FirstBad   []BadRow `json:"first_bad"`
	MaskedRows int64    `json:"masked_rows"` // rows with a loss_mask/labels value
	// Vocab is what ids were checked against; Size 0: only that they are
	// in [0, 2^31).
	Vocab Vocab `json:"vocab"`
}

// OK reports whether nothing was bad.
func (r ValidationReport) OK() bool { return r.BadRows == 0 && r.BadShards == 0 }

// Validate reads every shard under path chunk by chunk (a record batch at
// a time; memory-mapped shards are unmapped after) and checks each row:
// offsets inside the data, non-empty, length ≤ MaxLen, ids in [0,
// VocabSize), mask as long as the ids with values 0/1. A shard that cannot
// be read at all (truncated, wrong column type) is one bad entry naming
// the file and the first row it cannot give; the other shards are still
// checked. The error is for the walk itself (no such path, ctx ended).
func Validate(ctx context.Context, path string, o ValidateOptions) (ValidationReport, error) {
	rep := ValidationReport{Vocab: Vocab{Size: max(o.VocabSize, 0), From: o.VocabFrom}}
	if o.MaxBad <= 0 {
		o.MaxBad = 20
	}
	paths, err := ShardPaths(path)
	if err != nil {
		return rep, err
	}
	bad := func(b BadRow) {
		rep.BadRows++
		if len(rep.FirstBad) < o.MaxBad {
			rep.FirstBad = append(rep.FirstBad, b)
		}
	}
	for _, p := range paths {
		rep.Shards++
		format := o.Format
		if format == "" {
			format = FormatOf(p)
		}
		s := &Shard{Path: p, Format: format}
		if err := s.load(ctx); err != nil {
			if ctx.Err() != nil {
				return rep, ctx.Err()
			}
			rep.BadShards++
			if len(rep.FirstBad) < o.MaxBad {
				rep.FirstBad = append(rep.FirstBad, BadRow{Path: p, Row: -1, Reason: shardReason(err, p)})
			}
			continue
		}
		var row int64
		for bi := range s.batches {
			b := &s.batches[bi]
			for i := 0; i < int(b.rec.NumRows()); i++ {
				if reason := checkRow(b, i, o); reason != "" {
					bad(BadRow{Path: p, Row: row, Reason: reason})
				} else {
					rep.Tokens += int64(b.rowLen(i))
					if b.maskLen(i) >= 0 {
						rep.MaskedRows++
					}
				}
				row++
			}
			rep.Rows += b.rec.NumRows()
			if o.Progress != nil {
				o.Progress(p, row)
			}
			if err := ctx.Err(); err != nil {
				s.close()
				return rep, err
			}
		}
		s.close()
	}
	return rep, nil
}

// shardReason is a load error without the sentinel and path prefixes
// (the BadRow names the path).
func shardReason(err error, path string) string {
	msg := err.Error()
	for _, pre := range []string{ErrCorrupt.Error() + ": ", path + ": "} {
		msg = strings.TrimPrefix(msg, pre)
	}
	return msg
}

// checkRow is "" for a good row, else why it is bad.
func checkRow(b *batch, i int, o ValidateOptions) string {
	if err := b.checkOffsets(i); err != nil {
		return err.Error()
	}
	n := b.rowLen(i)
	if n == 0 {
		return "empty: no tokens"
	}
	if o.MaxLen > 0 && n > o.MaxLen {
		return fmt.Sprintf("%d tokens, over max_len %d", n, o.MaxLen)
	}
	if reason := checkIDs(b, i, o.VocabSize); reason != "" {
		return reason
	}
	if ml := b.maskLen(i); ml >= 0 {
		if ml != n {
			return fmt.Sprintf("%s has %d values, %s %d", b.maskName(), ml, ColInputIDs, n)
		}
		if b.mkind == maskUint8 || b.mkind == maskInt8 {
			lo := int(b.moffs[i])
			for j := 0; j < ml; j++ {
				var v int
				if b.mkind == maskUint8 {
					v = int(b.mu8[lo+j])
				} else {
					v = int(b.mi8[lo+j])
				}
				if v != 0 && v != 1 {
					return fmt.Sprintf("%s[%d] = %d: want 0 or 1", ColLossMask, j, v)
				}
			}
		}
	}
	return ""
}

// checkIDs finds the first id outside [0, vocab) (vocab 0: only < 0 and
// ids that do not fit int32 are bad).
func checkIDs(b *batch, i, vocab int) string {
	lo, hi := int(b.offs[i]), int(b.offs[i+1])
	limit := int64(1) << 31
	if vocab > 0 {
		limit = int64(vocab)
	}
	at := func(j int) int64 {
		switch b.kind {
		case idsUint16:
			return int64(b.u16[j])
		case idsInt32:
			return int64(b.i32[j])
		case idsUint32:
			return int64(b.u32[j])
		}
		return b.i64[j]
	}
	for j := lo; j < hi; j++ {
		if v := at(j); v < 0 || v >= limit {
			if vocab > 0 {
				return fmt.Sprintf("token %d: id %d outside the vocabulary [0, %d)", j-lo, v, vocab)
			}
			return fmt.Sprintf("token %d: id %d outside [0, 2^31)", j-lo, v)
		}
	}
	return ""
}
