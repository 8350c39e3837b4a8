package plan

import (
	"cmp"
	"slices"

	"github.com/asyncrl/asyncrl/messages"
)

// Pair is one (trainer rank, inference rank) connection of a plan.
type Pair struct{ Src, Dst int }

// Pairs lists every pair with at least one transfer, ordered by Src then
// Dst: one data-plane transfer (one messages.TransferPlan) each.
func (p *Plan) Pairs() []Pair {
	seen := map[Pair]bool{}
	var out []Pair
	for _, tr := range p.Transfers {
		k := Pair{tr.Src, tr.Dst}
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	slices.SortFunc(out, func(a, b Pair) int { return cmp.Or(cmp.Compare(a.Src, b.Src), cmp.Compare(a.Dst, b.Dst)) })
	return out
}

// ByteRanges turns the transfers from trainer rank src to inference rank
// dst into data-plane ranges — offsets in the sender's buffer, named after
// the tensor, checksums left for the sender to fill (dataplane.Checksum) —
// and, per range, the offset in the receiver's buffer (dataplane.Remap).
// messages.ByteRange has one offset, hence the second slice. A strided run
// becomes one range per block unless its blocks are contiguous on both
// sides.
func (p *Plan) ByteRanges(src, dst int) (ranges []messages.ByteRange, dstOffsets []int64) {
	for _, tr := range p.Transfers {
		if tr.Src != src || tr.Dst != dst {
			continue
		}
		name := p.Model.Tensors[tr.Tensor].Name
		r := tr.Run
		if r.Count == 1 || (r.SrcStride == r.Len && r.DstStride == r.Len) {
			ranges = append(ranges, messages.ByteRange{Name: name, Offset: r.SrcOff, Length: r.Bytes()})
			dstOffsets = append(dstOffsets, r.DstOff)
			continue
		}
		for k := range r.Count {
			ranges = append(ranges, messages.ByteRange{Name: name, Offset: r.SrcOff + k*r.SrcStride, Length: r.Len})
			dstOffsets = append(dstOffsets, r.DstOff+k*r.DstStride)
		}
	}
	return ranges, dstOffsets
}
