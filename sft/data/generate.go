package data

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// GenerateOptions describes a synthetic dataset.
type GenerateOptions struct {
	Dir       string
	Tokens    int64  // total tokens, split evenly over the shards
	Shards    int    // shard files
	Seed      uint64 // same seed, same dataset
	VocabSize int    // ids in [0, VocabSize); ≤ 65536 stores uint16 ids
	MinLen    int    // example lengths uniform in [MinLen, MaxLen]
	MaxLen    int
	Format    string // arrow (default) | parquet | jsonl
	// Pattern: "random" (uniform ids: nothing to learn) or "counting"
	// (each example counts up from a random start by a stride of 1–3,
	// mod the vocabulary: learnable, for a run whose loss must fall).
	Pattern string
	Mask    bool // a loss_mask column: the first quarter of each example 0 (a "prompt")
	Workers int  // shards written in parallel; 0 = 2
	// Progress, if set, is called after each shard with the shards done.
	Progress func(done, total int)
}

// ShardName is the file name of shard i of a generated or pretokenized dataset.
func ShardName(i int, format string) string { return fmt.Sprintf("shard-%05d.%s", i, format) }

// Generate writes a seeded synthetic dataset: Tokens tokens in Shards
// shards, each shard's content a function of (Seed, shard number) alone.
func Generate(ctx context.Context, o GenerateOptions) error {
	if o.Format == "" {
		o.Format = FormatArrow
	}
	if o.Pattern == "" {
		o.Pattern = "random"
	}
	if err := o.check(); err != nil {
		return err
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return fmt.Errorf("sft/data: %w", err)
	}
	ids := "int32"
	if o.VocabSize <= 1<<16 && o.Format != FormatJSONL {
		ids = "uint16"
	}
	workers := o.Workers
	if workers <= 0 {
		workers = 2
	}
	jobs := make(chan int)
	errs := make(chan error, o.Shards)
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				err := generateShard(ctx, o, i, o.shardTokens(i), ShardOptions{Format: o.Format, IDsType: ids, Mask: o.Mask})
				errs <- err
				mu.Lock()
				done++
				if o.Progress != nil && err == nil {
					o.Progress(done, o.Shards)
				}
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < o.Shards; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// check refuses options Generate cannot act on.
func (o *GenerateOptions) check() error {
	switch {
	case o.Tokens < 1 || o.Shards < 1:
		return fmt.Errorf("sft/data: generate: tokens %d and shards %d: want ≥ 1", o.Tokens, o.Shards)
	case o.VocabSize < 2 || o.VocabSize > 1<<31-1:
		return fmt.Errorf("sft/data: generate: vocab %d: want 2..2^31-1", o.VocabSize)
	case o.MinLen < 1 || o.MaxLen < o.MinLen:
		return fmt.Errorf("sft/data: generate: lengths [%d, %d]: want 1 ≤ min ≤ max", o.MinLen, o.MaxLen)
	case o.Pattern != "random" && o.Pattern != "counting":
		return fmt.Errorf("sft/data: generate: pattern %q: want random or counting", o.Pattern)
	}
	return nil
}

// shardTokens is shard i's share of the tokens (the remainder goes to the
// first shards).
func (o *GenerateOptions) shardTokens(i int) int64 {
	tokens := o.Tokens / int64(o.Shards)
	if i < int(o.Tokens%int64(o.Shards)) {
		tokens++
	}
	return tokens
}

// rng is a small seeded generator (SplitMix64): pure, no global state.
type rng struct{ s uint64 }

func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	return mix64(r.s)
}

func generateShard(ctx context.Context, o GenerateOptions, shard int, tokens int64, so ShardOptions) error {
	w, err := CreateShard(filepath.Join(o.Dir, ShardName(shard, o.Format)), so)
	if err != nil {
		return err
	}
	r := rng{s: hash3(o.Seed, 0x47454e, uint64(shard))}
	ids := make([]int32, o.MaxLen)
	var mask []uint8
	if o.Mask {
		mask = make([]uint8, o.MaxLen)
	}
	vocab := uint64(o.VocabSize)
	span := uint64(o.MaxLen - o.MinLen + 1)
	for left := tokens; left > 0; {
		n := int64(o.MinLen) + int64(below(r.next(), span))
		n = min(n, left)
		row := ids[:n]
		if o.Pattern == "counting" {
			start, stride := below(r.next(), vocab), 1+below(r.next(), 3)
			for j := range row {
				row[j] = int32((start + uint64(j)*stride) % vocab)
			}
		} else {
			for j := range row {
				row[j] = int32(below(r.next(), vocab))
			}
		}
		var m []uint8
		if o.Mask {
			m = mask[:n]
			for j := range m {
				m[j] = 0
				if int64(j) >= n/4 {
					m[j] = 1
				}
			}
		}
		if err := w.Append(row, m); err != nil {
			w.Close()
			return err
		}
		left -= n
		if w.Rows%4096 == 0 {
			if err := ctx.Err(); err != nil {
				w.Close()
				os.Remove(filepath.Join(o.Dir, ShardName(shard, o.Format)))
				return err
			}
		}
	}
	return w.Close()
}
