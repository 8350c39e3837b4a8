package dataplane

import (
	"fmt"
	"io"
	"sort"

	"github.com/asyncrl/asyncrl/messages"
)

// Remap returns a sink that stores byte off of ranges[i] at
// dstOffsets[i] + (off - ranges[i].Offset) in dst. A plan's range offsets
// are the sender's; a sharded transfer (plan.Plan.ByteRanges) lands the
// same bytes at other offsets of the receiver's buffer. The result is a
// Slicer when dst is, so backends still read straight into memory.
func Remap(dst io.WriterAt, ranges []messages.ByteRange, dstOffsets []int64) (io.WriterAt, error) {
	if len(dstOffsets) != len(ranges) {
		return nil, fmt.Errorf("%w: %d destination offsets for %d ranges", ErrBadPlan, len(dstOffsets), len(ranges))
	}
	if _, err := ValidateRanges(ranges); err != nil {
		return nil, err
	}
	r := &remap{dst: dst, idx: make([]int, len(ranges)), ranges: ranges, offs: dstOffsets}
	for i := range r.idx {
		r.idx[i] = i
	}
	sort.Slice(r.idx, func(a, b int) bool { return ranges[r.idx[a]].Offset < ranges[r.idx[b]].Offset })
	if s, ok := dst.(Slicer); ok {
		return &remapSlicer{remap: r, s: s}, nil
	}
	return r, nil
}

type remap struct {
	dst    io.WriterAt
	idx    []int // range indices sorted by Offset
	ranges []messages.ByteRange
	offs   []int64
}

// find returns the range holding off.
func (r *remap) find(off int64) (int, bool) {
	k := sort.Search(len(r.idx), func(k int) bool {
		rg := r.ranges[r.idx[k]]
		return rg.Offset+rg.Length > off
	})
	if k == len(r.idx) || r.ranges[r.idx[k]].Offset > off {
		return 0, false
	}
	return r.idx[k], true
}

func (r *remap) WriteAt(p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		i, ok := r.find(off + int64(n))
		if !ok {
			return n, fmt.Errorf("dataplane: remap: offset %d is in no range: %w", off+int64(n), io.ErrShortWrite)
		}
		rg := r.ranges[i]
		k := min(int64(len(p)-n), rg.Offset+rg.Length-(off+int64(n)))
		m, err := r.dst.WriteAt(p[n:n+int(k)], r.offs[i]+off+int64(n)-rg.Offset)
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

type remapSlicer struct {
	*remap
	s Slicer
}

func (r *remapSlicer) Slice(off, n int64) ([]byte, error) {
	i, ok := r.find(off)
	if !ok || off+n > r.ranges[i].Offset+r.ranges[i].Length {
		return nil, fmt.Errorf("dataplane: remap: window %d+%d is not inside one range: %w", off, n, io.ErrShortBuffer)
	}
	return r.s.Slice(r.offs[i]+off-r.ranges[i].Offset, n)
}
