package plan

import (
	"fmt"
	"slices"
)

// Validate checks p against its model and layouts without trusting how it
// was built: each inference rank's slab of each tensor it holds is covered
// exactly once by transfers from ranks that own those bytes, and every Run
// matches the layouts' offsets. It returns the first problem found, wrapping
// ErrMissing, ErrOverlap, ErrNotOwned or ErrBadRun.
func Validate(p *Plan) error {
	m := p.Model
	tOff, iOff := p.Train.offsets(m), p.Infer.offsets(m)
	// Group transfer indices by (tensor, destination slot).
	type key struct{ tensor, slot int }
	groups := map[key][]int{}
	for i, tr := range p.Transfers {
		if tr.Tensor < 0 || tr.Tensor >= len(m.Tensors) {
			return fmt.Errorf("%w: transfer %d: tensor index %d", ErrNotOwned, i, tr.Tensor)
		}
		t := &m.Tensors[tr.Tensor]
		ds := p.Infer.slot(m, t, tr.Dst)
		if ds < 0 {
			return fmt.Errorf("%w: transfer %d: inference rank %d holds no part of %s", ErrNotOwned, i, tr.Dst, t.Name)
		}
		ss := p.Train.slot(m, t, tr.Src)
		if ss < 0 {
			return fmt.Errorf("%w: transfer %d: trainer rank %d holds no part of %s", ErrNotOwned, i, tr.Src, t.Name)
		}
		slo, shi := shardBounds(p.Train, t, tr.Src)
		dlo, dhi := shardBounds(p.Infer, t, tr.Dst)
		if tr.Lo < slo || tr.Hi > shi || tr.Lo >= tr.Hi {
			return fmt.Errorf("%w: transfer %d: %s[%d:%d) but trainer rank %d holds [%d:%d)", ErrNotOwned, i, t.Name, tr.Lo, tr.Hi, tr.Src, slo, shi)
		}
		if tr.Lo < dlo || tr.Hi > dhi {
			return fmt.Errorf("%w: transfer %d: %s[%d:%d) but inference rank %d holds [%d:%d)", ErrNotOwned, i, t.Name, tr.Lo, tr.Hi, tr.Dst, dlo, dhi)
		}
		outer, inner, _ := t.geometry()
		want := run(outer, inner, tOff.shard[tr.Tensor][ss], slo, shi, iOff.shard[tr.Tensor][ds], dlo, dhi, tr.Lo, tr.Hi)
		if tr.Run != want {
			return fmt.Errorf("%w: transfer %d (%s[%d:%d) %d→%d): run %+v, want %+v", ErrBadRun, i, t.Name, tr.Lo, tr.Hi, tr.Src, tr.Dst, tr.Run, want)
		}
		groups[key{tr.Tensor, ds}] = append(groups[key{tr.Tensor, ds}], i)
	}
	for ti := range m.Tensors {
		t := &m.Tensors[ti]
		slot := 0
		for _, parts := range p.Infer.holders(m, t) {
			for _, d := range parts {
				idx := groups[key{ti, slot}]
				slot++
				slices.SortFunc(idx, func(a, b int) int {
					return int(p.Transfers[a].Lo - p.Transfers[b].Lo)
				})
				at := d.lo
				for _, i := range idx {
					tr := p.Transfers[i]
					if tr.Lo < at {
						return fmt.Errorf("%w: %s[%d:%d) reaches inference rank %d twice (transfer %d from rank %d)", ErrOverlap, t.Name, tr.Lo, min(at, tr.Hi), d.rank, i, tr.Src)
					}
					if tr.Lo > at {
						return fmt.Errorf("%w: %s[%d:%d) never reaches inference rank %d", ErrMissing, t.Name, at, tr.Lo, d.rank)
					}
					at = tr.Hi
				}
				if at < d.hi {
					return fmt.Errorf("%w: %s[%d:%d) never reaches inference rank %d", ErrMissing, t.Name, at, d.hi, d.rank)
				}
			}
		}
	}
	return nil
}

// shardBounds is the slab of t that rank holds (rank must hold some).
func shardBounds(l Layout, t *Tensor, rank int) (lo, hi int64) {
	_, _, extent := t.geometry()
	if t.Expert < 0 && t.TPDim >= 0 && l.TP > 1 {
		_, _, tp := l.Coords(rank)
		n := extent / int64(l.TP)
		return int64(tp) * n, int64(tp+1) * n
	}
	return 0, extent
}
