package data

import (
	"errors"
	"fmt"

	"github.com/asyncrl/asyncrl/actors/trainer/microbatch"
)

// Packing strategies.
const (
	PackFFD      = "ffd"
	PackBalanced = "balanced"
)

// ErrPack is wrapped by Pack's errors (bad config, an example over budget).
var ErrPack = errors.New("sft/data: pack")

// Pack lays examples end to end in bins of exactly Budget tokens (the
// tail is padding: token 0, loss mask 0, segment -1, position 0) using the
// microbatch core's packers: "ffd" is microbatch.FirstFitDecreasing, which
// also raises the bin count to a multiple of DP by splitting the fullest
// bins; "balanced" is microbatch.Balanced (least-loaded bin first). Where
// there are too few examples to split, padding-only bins make up the
// multiple of DP.
//
// Loss mask: LossMask[i] = 1 means token i is a training target, predicted
// from the tokens before it in its own segment. An example's nil mask is
// 1 everywhere but its first token; an explicit mask is copied, except
// that every segment's first token is 0 (nothing before it predicts it).
// Examples keep their order inside each bin as the packer placed them.
func Pack(examples []Example, cfg PackConfig) ([]Bin, error) {
	var p Packer
	return p.Pack(examples, cfg)
}

// Packer is Pack with buffers kept between calls: the bins a call returns
// share memory with the next call's, so use them (or copy them) before
// packing again. A data loop that hands bins to a trainer step by step
// saves the allocation and zeroing of every bin this way.
type Packer struct {
	toks, segs, pos []int32
	mask            []uint8
	ids             []ExampleID
	bins            []Bin
	// iota (0, 1, …) and ones, Budget long: copied into positions and
	// loss masks instead of filled value by value
	iota []int32
	ones []uint8
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// Pack packs as the package-level Pack does, into the Packer's buffers.
func (p *Packer) Pack(examples []Example, cfg PackConfig) ([]Bin, error) {
	if cfg.Budget < 1 {
		return nil, fmt.Errorf("%w: budget %d: want ≥ 1", ErrPack, cfg.Budget)
	}
	if cfg.DP < 1 {
		return nil, fmt.Errorf("%w: dp %d: want ≥ 1", ErrPack, cfg.DP)
	}
	lens := make([]int, len(examples))
	for i, ex := range examples {
		if len(ex.Tokens) == 0 || len(ex.Tokens) > cfg.Budget {
			return nil, fmt.Errorf("%w: example %v has %d tokens: want 1..%d (the budget; set max_len ≤ budget)", ErrPack, ex.ID, len(ex.Tokens), cfg.Budget)
		}
		if ex.LossMask != nil && len(ex.LossMask) != len(ex.Tokens) {
			return nil, fmt.Errorf("%w: example %v: loss mask of %d for %d tokens", ErrPack, ex.ID, len(ex.LossMask), len(ex.Tokens))
		}
		lens[i] = len(ex.Tokens)
	}
	if len(examples) == 0 {
		return nil, nil
	}
	var groups [][]int
	var err error
	switch cfg.Strategy {
	case PackFFD, "":
		groups, err = microbatch.FirstFitDecreasing(lens, cfg.Budget, 0, cfg.DP)
		if errors.Is(err, microbatch.ErrTooFewSequences) {
			groups, err = microbatch.FirstFitDecreasing(lens, cfg.Budget, 0, 1)
		}
	case PackBalanced:
		groups, err = microbatch.Balanced(lens, cfg.Budget)
	default:
		return nil, fmt.Errorf("%w: strategy %q: want ffd or balanced", ErrPack, cfg.Strategy)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPack, err)
	}
	for len(groups)%cfg.DP != 0 {
		groups = append(groups, nil)
	}
	// one buffer per field for all bins (each bin a capped window)
	nb, w := len(groups), cfg.Budget
	p.toks, p.mask = grow(p.toks, nb*w), grow(p.mask, nb*w)
	p.segs, p.pos = grow(p.segs, nb*w), grow(p.pos, nb*w)
	p.ids, p.bins = grow(p.ids, len(examples)), grow(p.bins, nb)
	if len(p.iota) != w {
		p.iota, p.ones = make([]int32, w), make([]uint8, w)
		for j := range p.iota {
			p.iota[j], p.ones[j] = int32(j), 1
		}
	}
	toks, mask, segs, pos, idSlab, bins := p.toks, p.mask, p.segs, p.pos, p.ids, p.bins
	used := 0
	for bi, g := range groups {
		lo, hi := bi*w, (bi+1)*w
		bins[bi] = Bin{Tokens: toks[lo:hi:hi], LossMask: mask[lo:hi:hi], Segments: segs[lo:hi:hi], Positions: pos[lo:hi:hi],
			IDs: idSlab[used : used+len(g) : used+len(g)]}
		used += len(g)
		p.fill(&bins[bi], examples, g, w)
	}
	return bins, nil
}

// fill lays the examples at indices g into b (budget long), padding after.
func (p *Packer) fill(b *Bin, examples []Example, g []int, budget int) {
	at := 0
	for seg, i := range g {
		ex := examples[i]
		b.IDs[seg] = ex.ID
		n := copy(b.Tokens[at:], ex.Tokens)
		if ex.LossMask != nil {
			copy(b.LossMask[at:at+n], ex.LossMask)
		} else {
			copy(b.LossMask[at:at+n], p.ones)
		}
		b.LossMask[at] = 0
		copy(b.Positions[at:at+n], p.iota)
		sg := b.Segments[at : at+n]
		for j := range sg {
			sg[j] = int32(seg)
		}
		at += n
	}
	clear(b.Tokens[at:])
	clear(b.LossMask[at:])
	clear(b.Positions[at:])
	pad := b.Segments[at:budget]
	for j := range pad {
		pad[j] = -1
	}
}
