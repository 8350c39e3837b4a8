package data

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Tokenizer is what pretokenizing needs of a tokenizer
// (policy/hftokenizer.Tokenizer has it).
type Tokenizer interface {
	Encode(text string) []int32
	VocabSize() int
}

// PretokenizeOptions: JSONL text in, Arrow (or Parquet) shards out.
type PretokenizeOptions struct {
	Out          string // output directory
	Format       string // arrow (default) | parquet
	RowsPerShard int    // 0 = 1<<20
	EOS          int32  // appended to each example when ≥ 0
	// Progress, if set, is called every 10000 rows with the rows done.
	Progress func(rows int64)
}

// PretokenizeStats counts what Pretokenize wrote.
type PretokenizeStats struct {
	Rows, Tokens int64
	Shards       int
}

type textRow struct {
	Text       *string `json:"text"`
	Prompt     *string `json:"prompt"`
	Completion *string `json:"completion"`
}

// Pretokenize reads JSONL lines {"text": ...} (every token a target) or
// {"prompt": ..., "completion": ...} (loss mask 0 on the prompt's tokens,
// 1 on the completion's) — one kind per file, decided by its first line —
// and writes shards of token ids. A bad line fails naming the file and line.
func Pretokenize(ctx context.Context, in string, tok Tokenizer, o PretokenizeOptions) (PretokenizeStats, error) {
	var st PretokenizeStats
	if o.Format == "" {
		o.Format = FormatArrow
	}
	if o.Format != FormatArrow && o.Format != FormatParquet {
		return st, fmt.Errorf("sft/data: pretokenize: format %q: want arrow or parquet", o.Format)
	}
	if o.RowsPerShard <= 0 {
		o.RowsPerShard = 1 << 20
	}
	f, err := os.Open(in)
	if err != nil {
		return st, fmt.Errorf("sft/data: %w", err)
	}
	defer f.Close()
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return st, fmt.Errorf("sft/data: %w", err)
	}
	ids := "int32"
	if tok.VocabSize() <= 1<<16 {
		ids = "uint16"
	}
	var w *ShardWriter
	mask := -1 // unknown until the first line: 0 text, 1 prompt/completion
	closeShard := func() error {
		if w == nil {
			return nil
		}
		err := w.Close()
		w = nil
		return err
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	line := 0
	var toks []int32
	var m []uint8
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var r textRow
		if err := json.Unmarshal(b, &r); err != nil {
			closeShard()
			return st, fmt.Errorf("sft/data: %s: line %d: %v", in, line, err)
		}
		kind := -1
		switch {
		case r.Text != nil && r.Prompt == nil && r.Completion == nil:
			kind = 0
		case r.Text == nil && r.Prompt != nil && r.Completion != nil:
			kind = 1
		}
		if kind < 0 {
			closeShard()
			return st, fmt.Errorf("sft/data: %s: line %d: want {\"text\": …} or {\"prompt\": …, \"completion\": …}", in, line)
		}
		if mask < 0 {
			mask = kind
		}
		if kind != mask {
			closeShard()
			return st, fmt.Errorf("sft/data: %s: line %d: mixes text and prompt/completion lines (line 1's kind is the file's)", in, line)
		}
		toks, m = toks[:0], m[:0]
		if kind == 0 {
			toks = append(toks, tok.Encode(*r.Text)...)
		} else {
			toks = append(toks, tok.Encode(*r.Prompt)...)
			for range toks {
				m = append(m, 0)
			}
			toks = append(toks, tok.Encode(*r.Completion)...)
		}
		if o.EOS >= 0 {
			toks = append(toks, o.EOS)
		}
		for len(m) < len(toks) && kind == 1 {
			m = append(m, 1)
		}
		if len(toks) == 0 {
			closeShard()
			return st, fmt.Errorf("sft/data: %s: line %d: no tokens", in, line)
		}
		if w == nil {
			w, err = CreateShard(filepath.Join(o.Out, ShardName(st.Shards, o.Format)), ShardOptions{Format: o.Format, IDsType: ids, Mask: kind == 1})
			if err != nil {
				return st, err
			}
			st.Shards++
		}
		var mm []uint8
		if kind == 1 {
			mm = m
		}
		if err := w.Append(toks, mm); err != nil {
			closeShard()
			return st, err
		}
		st.Rows++
		st.Tokens += int64(len(toks))
		if w.Rows >= int64(o.RowsPerShard) {
			if err := closeShard(); err != nil {
				return st, err
			}
		}
		if st.Rows%10000 == 0 {
			if o.Progress != nil {
				o.Progress(st.Rows)
			}
			if err := ctx.Err(); err != nil {
				closeShard()
				return st, err
			}
		}
	}
	if err := sc.Err(); err != nil {
		closeShard()
		return st, fmt.Errorf("sft/data: %s: after line %d: %w", in, line, err)
	}
	if st.Rows == 0 {
		return st, fmt.Errorf("sft/data: %s: no rows", in)
	}
	return st, closeShard()
}
