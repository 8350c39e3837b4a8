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
// (model/hftokenizer.Tokenizer has it).
type Tokenizer interface {
	Encode(text string) []int32
	VocabSize() int
}

// ChatTokenizer renders a chat row: the ids of the whole conversation and
// a loss mask that is 1 on the assistant's tokens only
// (model/chattemplate.Tokenizer.ChatTokens: content through each turn's
// EOS, refusing a row whose rendering is not prefix-consistent).
type ChatTokenizer interface {
	ChatTokens(messages, tools json.RawMessage) ([]int32, []uint8, error)
}

// PretokenizeOptions: JSONL text in, Arrow (or Parquet) shards out.
type PretokenizeOptions struct {
	Out          string // output directory
	Format       string // arrow (default) | parquet
	RowsPerShard int    // 0 = 1<<20
	EOS          int32  // appended to each text or prompt/completion example when ≥ 0 (not to chat rows: the template closes every turn)
	// Chat renders {"messages": …} rows with a chat template; nil refuses
	// them.
	Chat ChatTokenizer
	// Progress, if set, is called every 10000 rows with the rows done.
	Progress func(rows int64)
}

// PretokenizeStats counts what Pretokenize wrote.
type PretokenizeStats struct {
	Rows, Tokens int64
	Shards       int
}

type textRow struct {
	Text       *string         `json:"text"`
	Prompt     *string         `json:"prompt"`
	Completion *string         `json:"completion"`
	Messages   json.RawMessage `json:"messages"`
	Tools      json.RawMessage `json:"tools"`
}

// Row kinds: a file holds one, decided by its first line.
const (
	rowText       = 0 // {"text"}: every token a target
	rowCompletion = 1 // {"prompt", "completion"}: the completion's tokens
	rowChat       = 2 // {"messages", "tools"?}: the assistant's tokens
)

func (r *textRow) kind() int {
	switch {
	case r.Text != nil && r.Prompt == nil && r.Completion == nil && r.Messages == nil:
		return rowText
	case r.Text == nil && r.Prompt != nil && r.Completion != nil && r.Messages == nil:
		return rowCompletion
	case r.Text == nil && r.Prompt == nil && r.Completion == nil && r.Messages != nil:
		return rowChat
	}
	return -1
}

// rowTokens tokenizes one row into toks and its mask m (empty for text rows).
func rowTokens(r *textRow, kind int, tok Tokenizer, o *PretokenizeOptions, toks []int32, m []uint8) ([]int32, []uint8, error) {
	switch kind {
	case rowChat:
		ids, mask, err := o.Chat.ChatTokens(r.Messages, r.Tools)
		if err != nil {
			return nil, nil, err
		}
		return append(toks, ids...), append(m, mask...), nil
	case rowText:
		toks = append(toks, tok.Encode(*r.Text)...)
	default:
		toks = append(toks, tok.Encode(*r.Prompt)...)
		for range toks {
			m = append(m, 0)
		}
		toks = append(toks, tok.Encode(*r.Completion)...)
	}
	if o.EOS >= 0 {
		toks = append(toks, o.EOS)
	}
	for len(m) < len(toks) && kind == rowCompletion {
		m = append(m, 1)
	}
	return toks, m, nil
}

// Pretokenize reads JSONL lines {"text": ...} (every token a target),
// {"prompt": ..., "completion": ...} (loss mask 0 on the prompt's tokens,
// 1 on the completion's) or {"messages": [...], "tools": [...]} (chat rows,
// rendered with o.Chat's template, loss mask 1 on the assistant's tokens
// only) — one kind per file, decided by its first line — and writes shards
// of token ids. A bad line (a chat row whose rendering is not
// prefix-consistent included) fails naming the file and line.
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
	p := &pretokenizer{in: in, tok: tok, o: o, ids: "int32", mask: -1}
	if tok.VocabSize() <= 1<<16 {
		p.ids = "uint16"
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if err := p.row(ctx, b, line); err != nil {
			p.closeShard()
			return p.st, err
		}
	}
	if err := sc.Err(); err != nil {
		p.closeShard()
		return p.st, fmt.Errorf("sft/data: %s: after line %d: %w", in, line, err)
	}
	if p.st.Rows == 0 {
		return p.st, fmt.Errorf("sft/data: %s: no rows", in)
	}
	return p.st, p.closeShard()
}

// pretokenizer is one Pretokenize run's state: the shard being written,
// the file's row kind and the token buffers reused from row to row.
type pretokenizer struct {
	in   string
	tok  Tokenizer
	o    PretokenizeOptions
	ids  string // the shards' token id type
	st   PretokenizeStats
	w    *ShardWriter
	mask int // the file's row kind, unknown (-1) until the first line
	toks []int32
	m    []uint8
}

func (p *pretokenizer) closeShard() error {
	if p.w == nil {
		return nil
	}
	err := p.w.Close()
	p.w = nil
	return err
}

// row tokenizes one JSONL line and appends it to the current shard (a new
// one when none is open), closing the shard when it is full; the caller
// closes the shard on error.
func (p *pretokenizer) row(ctx context.Context, b []byte, line int) error {
	kind, err := p.tokenize(b, line)
	if err != nil {
		return err
	}
	if p.w == nil {
		p.w, err = CreateShard(filepath.Join(p.o.Out, ShardName(p.st.Shards, p.o.Format)), ShardOptions{Format: p.o.Format, IDsType: p.ids, Mask: kind != rowText})
		if err != nil {
			return err
		}
		p.st.Shards++
	}
	var mm []uint8
	if kind != rowText {
		mm = p.m
	}
	if err := p.w.Append(p.toks, mm); err != nil {
		return err
	}
	p.st.Rows++
	p.st.Tokens += int64(len(p.toks))
	if p.w.Rows >= int64(p.o.RowsPerShard) {
		if err := p.closeShard(); err != nil {
			return err
		}
	}
	if p.st.Rows%10000 == 0 {
		if p.o.Progress != nil {
			p.o.Progress(p.st.Rows)
		}
		return ctx.Err()
	}
	return nil
}

// tokenize parses line's row, checks its kind against the file's, and
// tokenizes it into p.toks and p.m.
func (p *pretokenizer) tokenize(b []byte, line int) (kind int, err error) {
	in := p.in
	var r textRow
	if err := json.Unmarshal(b, &r); err != nil {
		return 0, fmt.Errorf("sft/data: %s: line %d: %v", in, line, err)
	}
	kind = r.kind()
	if kind < 0 {
		return 0, fmt.Errorf("sft/data: %s: line %d: want {\"text\": …}, {\"prompt\": …, \"completion\": …} or {\"messages\": […]}", in, line)
	}
	if kind == rowChat && p.o.Chat == nil {
		return 0, fmt.Errorf("sft/data: %s: line %d: a chat row needs a tokenizer with a chat template (asyncrl data pretokenize --tokenizer DIR, the tokenizer's directory)", in, line)
	}
	if p.mask < 0 {
		p.mask = kind
	}
	if kind != p.mask {
		return 0, fmt.Errorf("sft/data: %s: line %d: mixes row kinds (line 1's kind is the file's)", in, line)
	}
	p.toks, p.m, err = rowTokens(&r, kind, p.tok, &p.o, p.toks[:0], p.m[:0])
	if err != nil {
		return 0, fmt.Errorf("sft/data: %s: line %d: %w", in, line, err)
	}
	if len(p.toks) == 0 {
		return 0, fmt.Errorf("sft/data: %s: line %d: no tokens", in, line)
	}
	return kind, nil
}
