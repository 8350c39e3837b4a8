package data

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// ThroughputOptions: how Throughput drives the data path.
type ThroughputOptions struct {
	Tokens int64      // stop after this many tokens (0 = until the stream ends)
	Batch  int        // examples per Pack call
	Pack   PackConfig // bins
	// Clock is the time source (time.Now when nil): a bench is a shell.
	Clock func() time.Time
}

// ThroughputResult is what one pass measured.
type ThroughputResult struct {
	Examples, Tokens int64
	Bins             int64
	PaddingTokens    int64
	Elapsed          time.Duration
}

// TokensPerSecond is Tokens / Elapsed.
func (r ThroughputResult) TokensPerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Tokens) / r.Elapsed.Seconds()
}

// Throughput runs the data path — sample, read, pack — with no trainer,
// for benchmarks and `asyncrl data bench`.
func Throughput(ctx context.Context, s Stream, o ThroughputOptions) (ThroughputResult, error) {
	var r ThroughputResult
	if o.Batch <= 0 {
		return r, fmt.Errorf("sft/data: throughput: batch %d: want ≥ 1", o.Batch)
	}
	now := o.Clock
	if now == nil {
		now = time.Now
	}
	t0 := now()
	batch := make([]Example, 0, o.Batch)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		bins, err := Pack(batch, o.Pack)
		if err != nil {
			return err
		}
		r.Bins += int64(len(bins))
		r.PaddingTokens += int64(len(bins))*int64(o.Pack.Budget) - sumTokens(batch)
		batch = batch[:0]
		return nil
	}
	for o.Tokens == 0 || r.Tokens < o.Tokens {
		ex, err := s.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return r, err
		}
		r.Examples++
		r.Tokens += int64(len(ex.Tokens))
		batch = append(batch, ex)
		if len(batch) == o.Batch {
			if err := flush(); err != nil {
				return r, err
			}
		}
	}
	if err := flush(); err != nil {
		return r, err
	}
	r.Elapsed = now().Sub(t0)
	return r, nil
}

func sumTokens(exs []Example) int64 {
	var t int64
	for _, e := range exs {
		t += int64(len(e.Tokens))
	}
	return t
}
