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
	// Pipelined packs on a second goroutine while the stream reads the
	// next batch (two cores: one reading, one packing).
	Pipelined bool
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

// Throughput runs the data path — sample, read, pack (a Packer reusing
// its buffers, as a training loop would) — with no trainer,
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
	var packer Packer
	pack := func(batch []Example) (int64, int64, error) {
		bins, err := packer.Pack(batch, o.Pack)
		if err != nil {
			return 0, 0, err
		}
		return int64(len(bins)), int64(len(bins))*int64(o.Pack.Budget) - sumTokens(batch), nil
	}
	var packed chan [2]int64
	var work chan []Example
	var packErr error
	if o.Pipelined {
		work, packed = make(chan []Example, 1), make(chan [2]int64, 1)
		go func() {
			var bins, pad int64
			for b := range work {
				nb, np, err := pack(b)
				if err != nil && packErr == nil {
					packErr = err
				}
				bins, pad = bins+nb, pad+np
			}
			packed <- [2]int64{bins, pad}
		}()
	}
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if o.Pipelined {
			work <- batch
			batch = make([]Example, 0, o.Batch)
			return nil
		}
		nb, np, err := pack(batch)
		if err != nil {
			return err
		}
		r.Bins += nb
		r.PaddingTokens += np
		batch = batch[:0]
		return nil
	}
	finish := func() error {
		if !o.Pipelined {
			return nil
		}
		close(work)
		t := <-packed
		r.Bins, r.PaddingTokens = t[0], t[1]
		o.Pipelined = false
		return packErr
	}
	defer finish()
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
	if err := finish(); err != nil {
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
