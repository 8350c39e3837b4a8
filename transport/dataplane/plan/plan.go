package plan

import (
	"cmp"
	"fmt"
	"slices"
)

// Config tunes the planner.
type Config struct {
	// SplitBytes: a piece at least this large, with several trainer
	// replicas holding it, is cut into one slab per replica so they send
	// in parallel; 0 never splits. Default 64 MiB — below that the extra
	// requests cost more than the parallelism gains.
	SplitBytes int64
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config { return Config{SplitBytes: 64 << 20} }

// Run is the bytes of a Transfer in the two ranks' buffers: Count blocks
// of Len bytes, block k at SrcOff+k·SrcStride in the sender's buffer and
// DstOff+k·DstStride in the receiver's.
type Run struct {
	SrcOff, DstOff       int64
	Len                  int64
	Count                int64
	SrcStride, DstStride int64
}

// Bytes is Len·Count.
func (r Run) Bytes() int64 { return r.Len * r.Count }

// Transfer sends slab [Lo, Hi) of a tensor's split dimension from trainer
// rank Src to inference rank Dst.
type Transfer struct {
	// Tensor indexes Model.Tensors.
	Tensor int
	// Src is the trainer rank, Dst the inference rank.
	Src, Dst int
	// Lo, Hi bound the slab along the tensor's split dimension (TPDim, or
	// dimension 0 for tensors no TP splits).
	Lo, Hi int64
	// Run locates the bytes.
	Run Run
}

// Plan is the planner's output.
type Plan struct {
	Model        *Model
	Train, Infer Layout
	// Transfers in tensor order, then inference rank, then slab.
	Transfers []Transfer
	// SendBytes per trainer rank and RecvBytes per inference rank: the
	// load the spreading balanced. The slowest rank bounds the sync time.
	SendBytes, RecvBytes []int64
	// TrainOffsets and InferOffsets lay out each rank's buffer.
	TrainOffsets, InferOffsets *Offsets
}

// TotalBytes is the sum of every transfer.
func (p *Plan) TotalBytes() int64 {
	var n int64
	for _, b := range p.RecvBytes {
		n += b
	}
	return n
}

// Build plans the transfer of m from the train layout to the infer layout.
func Build(cfg Config, m *Model, train, infer Layout) (*Plan, error) {
	if cfg.SplitBytes < 0 {
		return nil, fmt.Errorf("%w: Config.SplitBytes must be >= 0 (0 = never split), got %d", ErrBadLayout, cfg.SplitBytes)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	if err := train.Validate(m); err != nil {
		return nil, fmt.Errorf("trainer layout: %w", err)
	}
	if err := infer.Validate(m); err != nil {
		return nil, fmt.Errorf("inference layout: %w", err)
	}
	p := &Plan{
		Model: m, Train: train, Infer: infer,
		SendBytes: make([]int64, train.World()), RecvBytes: make([]int64, infer.World()),
		TrainOffsets: train.offsets(m), InferOffsets: infer.offsets(m),
	}
	var reps []holding
	for ti := range m.Tensors {
		t := &m.Tensors[ti]
		outer, inner, _ := t.geometry()
		srcParts := train.holders(m, t)
		dstSlot := 0
		for _, dparts := range infer.holders(m, t) {
			for _, d := range dparts {
				dstOff := p.InferOffsets.shard[ti][dstSlot]
				dstSlot++
				for _, sp := range srcParts {
					lo, hi := max(d.lo, sp[0].lo), min(d.hi, sp[0].hi)
					if lo >= hi {
						continue
					}
					// Least-loaded replicas first; ties to the lowest rank.
					reps = append(reps[:0], sp...)
					slices.SortStableFunc(reps, func(a, b holding) int {
						return cmp.Or(cmp.Compare(p.SendBytes[a.rank], p.SendBytes[b.rank]), cmp.Compare(a.rank, b.rank))
					})
					k := int64(1)
					if bytes := outer * (hi - lo) * inner; cfg.SplitBytes > 0 && bytes >= cfg.SplitBytes {
						k = min(int64(len(reps)), hi-lo)
					}
					for j := range k {
						a, b := lo+(hi-lo)*j/k, lo+(hi-lo)*(j+1)/k
						s := reps[j]
						srcOff, _ := p.TrainOffsets.Offset(ti, s.rank)
						tr := Transfer{Tensor: ti, Src: s.rank, Dst: d.rank, Lo: a, Hi: b,
							Run: run(outer, inner, srcOff, s.lo, s.hi, dstOff, d.lo, d.hi, a, b)}
						p.Transfers = append(p.Transfers, tr)
						p.SendBytes[s.rank] += tr.Run.Bytes()
						p.RecvBytes[d.rank] += tr.Run.Bytes()
					}
				}
			}
		}
	}
	return p, nil
}

// run computes the byte run of slab [a, b) between a source shard
// [slo, shi) stored at srcOff and a destination shard [dlo, dhi) at dstOff.
func run(outer, inner, srcOff, slo, shi, dstOff, dlo, dhi, a, b int64) Run {
	return Run{
		SrcOff: srcOff + (a-slo)*inner, DstOff: dstOff + (a-dlo)*inner,
		Len: (b - a) * inner, Count: outer,
		SrcStride: (shi - slo) * inner, DstStride: (dhi - dlo) * inner,
	}
}

// Busiest returns the largest number of bytes any single rank sends or
// receives: with every rank on its own link of the same speed, the sync
// takes at least Busiest()/link bytes-per-second.
func (p *Plan) Busiest() int64 {
	var m int64
	for _, b := range p.SendBytes {
		m = max(m, b)
	}
	for _, b := range p.RecvBytes {
		m = max(m, b)
	}
	return m
}

// LowerBound is the sync time implied by Busiest at linkBytesPerSecond
// per rank (no overlap losses, no protocol overhead): a floor to compare
// measured syncs with, not a prediction.
func (p *Plan) LowerBound(linkBytesPerSecond float64) float64 {
	if linkBytesPerSecond <= 0 {
		return 0
	}
	return float64(p.Busiest()) / linkBytesPerSecond
}
