package data

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Dataset is one configured dataset: its shards in path order and their
// indexes. Rows are numbered across shards in that order (a Pick's
// Index). A Dataset is not safe for concurrent use.
type Dataset struct {
	Name   string
	Shards []*Shard
	Rows   int64
	Tokens int64
	// IndexBuilt counts shards whose index was built now (not cached), and
	// IndexTime the time that took; Warnings has what went wrong caching.
	IndexBuilt int
	IndexTime  time.Duration
	Warnings   []string

	starts []int64 // row starts of shards, len(Shards)+1
}

// ShardPaths resolves a dataset path: a file, a directory (its files with a
// known extension, sorted; dot files skipped) or a glob.
func ShardPaths(path string) ([]string, error) {
	st, err := os.Stat(path)
	switch {
	case err == nil && !st.IsDir():
		return []string{path}, nil
	case err == nil:
		ents, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("sft/data: %w", err)
		}
		var out []string
		for _, e := range ents {
			if e.IsDir() || strings.HasPrefix(e.Name(), ".") || FormatOf(e.Name()) == "" {
				continue
			}
			out = append(out, filepath.Join(path, e.Name()))
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("sft/data: %s: no .arrow, .parquet or .jsonl files", path)
		}
		return out, nil
	}
	matches, gerr := filepath.Glob(path)
	if gerr != nil {
		return nil, fmt.Errorf("sft/data: path %q: %w", path, gerr)
	}
	if len(matches) == 0 {
		return nil, fmt.Errorf("sft/data: %s: no such file, directory or glob match", path)
	}
	sort.Strings(matches)
	return matches, nil
}

// OpenDataset resolves dc's shards and indexes them (cached indexes where
// they match the files). Parquet and JSONL shards whose index is cached
// are not read until a row of theirs is.
func OpenDataset(ctx context.Context, dc DatasetConfig, opt IndexOptions) (*Dataset, error) {
	paths, err := ShardPaths(dc.Path)
	if err != nil {
		return nil, err
	}
	d := &Dataset{Name: dc.Name, starts: []int64{0}}
	for _, p := range paths {
		format := dc.Format
		if format == "" {
			format = FormatOf(p)
		}
		if format != FormatArrow && format != FormatParquet && format != FormatJSONL {
			d.Close()
			return nil, fmt.Errorf("sft/data: %s: format %q: want arrow, parquet or jsonl (or a known extension)", p, format)
		}
		s := &Shard{Path: p, Format: format}
		d.Shards = append(d.Shards, s)
		ix, built, took, err := opt.indexShard(ctx, s)
		if err != nil && !built {
			d.Close()
			return nil, err
		}
		if err != nil {
			d.Warnings = append(d.Warnings, err.Error())
		}
		if built {
			d.IndexBuilt++
			d.IndexTime += took
		}
		s.Index = ix
		d.Rows += ix.Rows
		d.Tokens += ix.Tokens
		d.starts = append(d.starts, d.Rows)
	}
	return d, nil
}

// Locate returns the shard number and the row within it of the dataset's row i.
func (d *Dataset) Locate(i int64) (int, int64) {
	k := sort.Search(len(d.Shards), func(j int) bool { return d.starts[j+1] > i })
	return k, i - d.starts[k]
}

// Close unmaps and releases every shard.
func (d *Dataset) Close() {
	for _, s := range d.Shards {
		s.close()
	}
}
