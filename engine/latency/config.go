package latency

import (
	"fmt"
	"time"
)

// Config sizes the modelled GPU server. Every duration is modelled time at
// time scale 1; the core never sleeps.
type Config struct {
	// MaxNumSeqs is the most sequences decoded together in one step
	// (vLLM --max-num-seqs). Requests beyond it wait in the FIFO queue.
	MaxNumSeqs int `json:"max_num_seqs" yaml:"max_num_seqs"`
	// MaxWaiting is the most requests that may wait beyond the free seats
	// of MaxNumSeqs; Add beyond it returns ErrQueueFull (the server answers
	// 429). 0 = no queue. Preempted sequences re-enter it regardless.
	MaxWaiting int `json:"max_waiting" yaml:"max_waiting"`
	// BlockSize is the number of tokens per KV-cache block (vLLM: 16).
	BlockSize int `json:"block_size" yaml:"block_size"`
	// CacheBlocks is the KV-cache capacity in blocks. It bounds both the
	// running batch's KV and the prefix cache (unreferenced blocks keep
	// their contents until evicted, least recently used first).
	CacheBlocks int `json:"cache_blocks" yaml:"cache_blocks"`
	// PrefillPerToken is the cost of computing one uncached prompt token.
	PrefillPerToken time.Duration `json:"prefill_per_token" yaml:"prefill_per_token"`
	// DecodeBase is the fixed cost of one engine step (one forward pass).
	DecodeBase time.Duration `json:"decode_base" yaml:"decode_base"`
	// DecodePerSeq is the extra step cost per sequence in the running
	// batch: step = DecodeBase + DecodePerSeq·batch + PrefillPerToken·uncached.
	DecodePerSeq time.Duration `json:"decode_per_seq" yaml:"decode_per_seq"`
}

// DefaultConfig models a mid-size model on one modern GPU: ~25k prefill
// tokens/s, a 10 ms step at batch 1 growing by 50 µs per sequence, and
// 8192 blocks (131072 tokens) of KV cache.
func DefaultConfig() Config {
	return Config{
		MaxNumSeqs:      256,
		MaxWaiting:      4096,
		BlockSize:       16,
		CacheBlocks:     8192,
		PrefillPerToken: 40 * time.Microsecond,
		DecodeBase:      10 * time.Millisecond,
		DecodePerSeq:    50 * time.Microsecond,
	}
}

// Validate names the first invalid field and its allowed values.
func (c Config) Validate() error {
	switch {
	case c.MaxNumSeqs < 1:
		return fmt.Errorf("%w: MaxNumSeqs must be >= 1, got %d", ErrConfig, c.MaxNumSeqs)
	case c.MaxWaiting < 0:
		return fmt.Errorf("%w: MaxWaiting must be >= 0, got %d", ErrConfig, c.MaxWaiting)
	case c.BlockSize < 1:
		return fmt.Errorf("%w: BlockSize must be >= 1, got %d", ErrConfig, c.BlockSize)
	case c.CacheBlocks < 1:
		return fmt.Errorf("%w: CacheBlocks must be >= 1, got %d", ErrConfig, c.CacheBlocks)
	case c.PrefillPerToken < 0 || c.DecodeBase < 0 || c.DecodePerSeq < 0:
		return fmt.Errorf("%w: PrefillPerToken, DecodeBase and DecodePerSeq must be >= 0", ErrConfig)
	}
	return nil
}
