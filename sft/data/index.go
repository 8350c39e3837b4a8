package data

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"time"
)

// indexVersion changes when ShardIndex's meaning does; an index of another
// version is rebuilt.
const indexVersion = 1

// LenBuckets is the number of length-histogram buckets: bucket 0 counts
// empty rows, bucket k ≥ 1 rows of length in [2^(k-1), 2^k).
const LenBuckets = 33

// ShardIndex is what the cached index knows of one shard without reading
// it again: built once (a pass over the offsets, not the tokens) and valid
// while the file's size and modification time are unchanged.
type ShardIndex struct {
	Version   int               `json:"version"`
	Size      int64             `json:"size"`
	MtimeNS   int64             `json:"mtime_ns"`
	Format    string            `json:"format"`
	Rows      int64             `json:"rows"`
	Tokens    int64             `json:"tokens"`
	BatchRows []int64           `json:"batch_rows"` // rows per record batch (row group for Parquet)
	IDsType   string            `json:"ids_type"`
	Mask      string            `json:"mask,omitempty"` // loss_mask | labels | ""
	MinLen    int64             `json:"min_len"`
	MaxLen    int64             `json:"max_len"`
	LenHist   [LenBuckets]int64 `json:"len_hist"`
}

// IndexOptions says where indexes are cached.
type IndexOptions struct {
	// Dir holds the index files; "" = next to each shard (".<name>.idx.json"),
	// falling back to the user cache dir when the shard's folder is read-only.
	Dir string
	// Rebuild ignores cached indexes.
	Rebuild bool
}

func lenBucket(n int64) int {
	if n <= 0 {
		return 0
	}
	return min(bits.Len64(uint64(n)), LenBuckets-1)
}

func (o IndexOptions) paths(shard string) []string {
	abs, err := filepath.Abs(shard)
	if err != nil {
		abs = shard
	}
	sum := sha256.Sum256([]byte(abs))
	named := hex.EncodeToString(sum[:8]) + "-" + filepath.Base(shard) + ".idx.json"
	if o.Dir != "" {
		return []string{filepath.Join(o.Dir, named)}
	}
	out := []string{filepath.Join(filepath.Dir(shard), "."+filepath.Base(shard)+".idx.json")}
	if c, err := os.UserCacheDir(); err == nil {
		out = append(out, filepath.Join(c, "asyncrl", "sft-index", named))
	}
	return out
}

// loadIndex returns the shard's cached index if one matches the file.
func (o IndexOptions) loadIndex(s *Shard, st os.FileInfo) (ShardIndex, bool) {
	if o.Rebuild {
		return ShardIndex{}, false
	}
	for _, p := range o.paths(s.Path) {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var ix ShardIndex
		if json.Unmarshal(b, &ix) != nil {
			continue
		}
		if ix.Version == indexVersion && ix.Size == st.Size() && ix.MtimeNS == st.ModTime().UnixNano() && ix.Format == s.Format {
			return ix, true
		}
	}
	return ShardIndex{}, false
}

// saveIndex writes the index to the first place that takes it (atomically:
// a temp file renamed), so a failed write never leaves a half index.
func (o IndexOptions) saveIndex(s *Shard, ix ShardIndex) error {
	b, err := json.Marshal(ix)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range o.paths(s.Path) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			errs = append(errs, err)
			continue
		}
		tmp := fmt.Sprintf("%s.%d.tmp", p, os.Getpid())
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := os.Rename(tmp, p); err != nil {
			_ = os.Remove(tmp)
			errs = append(errs, err)
			continue
		}
		return nil
	}
	return fmt.Errorf("sft/data: cannot cache the index of %s: %v", s.Path, errs)
}

// buildIndex loads the shard and scans its offsets: row and token counts,
// lengths, and the structural check (offsets in order and inside the
// values) that lets reads trust them.
func buildIndex(ctx context.Context, s *Shard, st os.FileInfo) (ShardIndex, error) {
	if err := s.load(ctx); err != nil {
		return ShardIndex{}, err
	}
	ix := ShardIndex{Version: indexVersion, Size: st.Size(), MtimeNS: st.ModTime().UnixNano(), Format: s.Format, MinLen: -1}
	var row int64
	for bi := range s.batches {
		b := &s.batches[bi]
		if bi == 0 {
			ix.IDsType = b.kind.String()
			if b.mask != nil {
				ix.Mask = b.maskName()
			}
		}
		n := b.rec.NumRows()
		ix.BatchRows = append(ix.BatchRows, n)
		for i := 0; i < int(n); i++ {
			if err := b.checkOffsets(i); err != nil {
				return ShardIndex{}, fmt.Errorf("%w: %w", ErrCorrupt, &RowError{Path: s.Path, Row: row, Err: err})
			}
			l := int64(b.rowLen(i))
			ix.Tokens += l
			ix.LenHist[lenBucket(l)]++
			if ix.MinLen < 0 || l < ix.MinLen {
				ix.MinLen = l
			}
			ix.MaxLen = max(ix.MaxLen, l)
			row++
		}
		if err := ctx.Err(); err != nil {
			return ShardIndex{}, err
		}
	}
	ix.Rows = row
	ix.MinLen = max(ix.MinLen, 0)
	return ix, nil
}

// indexShard returns the shard's index: the cached one if it matches,
// else a fresh one (cached for next time). built says which.
func (o IndexOptions) indexShard(ctx context.Context, s *Shard) (ix ShardIndex, built bool, took time.Duration, err error) {
	st, err := os.Stat(s.Path)
	if err != nil {
		return ix, false, 0, fmt.Errorf("sft/data: %w", err)
	}
	if ix, ok := o.loadIndex(s, st); ok {
		return ix, false, 0, nil
	}
	t0 := time.Now()
	ix, err = buildIndex(ctx, s, st)
	if err != nil {
		return ix, false, 0, err
	}
	took = time.Since(t0)
	if s.Format == FormatArrow {
		// the pass paged the offsets in; unmap so they leave the resident
		// set (the stream maps the shard again when it first reads it)
		s.close()
	}
	if err := o.saveIndex(s, ix); err != nil {
		return ix, true, took, err
	}
	return ix, true, took, nil
}
