package plan

import "fmt"

// Layout is how one side (trainer or inference fleet) shards the model.
type Layout struct {
	// TP: tensor-parallel size (ranks splitting each dense tensor), >= 1.
	TP int
	// PP: pipeline stages (contiguous layer blocks), >= 1.
	PP int
	// DP: data-parallel replicas, >= 1. World size is TP·PP·DP.
	DP int
	// EP: expert-parallel groups among the DP·TP ranks of a stage; must
	// divide DP·TP and the model's expert count. 1 replicates every expert
	// on every rank of its stage.
	EP int
}

func (l Layout) String() string {
	return fmt.Sprintf("tp%d/pp%d/dp%d/ep%d", l.TP, l.PP, l.DP, l.EP)
}

// World is the number of ranks.
func (l Layout) World() int { return l.TP * l.PP * l.DP }

// Rank numbers a (stage, replica, tensor-parallel) coordinate.
func (l Layout) Rank(pp, dp, tp int) int { return (pp*l.DP+dp)*l.TP + tp }

// Coords inverts Rank.
func (l Layout) Coords(rank int) (pp, dp, tp int) {
	return rank / (l.DP * l.TP), rank / l.TP % l.DP, rank % l.TP
}

// Validate checks the layout against m.
func (l Layout) Validate(m *Model) error {
	for _, f := range []struct {
		name string
		v    int
	}{{"TP", l.TP}, {"PP", l.PP}, {"DP", l.DP}, {"EP", l.EP}} {
		if f.v < 1 {
			return fmt.Errorf("%w: %s: %s must be >= 1, got %d", ErrBadLayout, l, f.name, f.v)
		}
	}
	if l.PP > m.Layers {
		return fmt.Errorf("%w: %s: PP %d exceeds the model's %d layers", ErrBadLayout, l, l.PP, m.Layers)
	}
	if (l.DP*l.TP)%l.EP != 0 {
		return fmt.Errorf("%w: %s: EP %d must divide DP·TP = %d", ErrBadLayout, l, l.EP, l.DP*l.TP)
	}
	if m.Experts > 0 && m.Experts%l.EP != 0 {
		return fmt.Errorf("%w: %s: EP %d must divide the model's %d experts", ErrBadLayout, l, l.EP, m.Experts)
	}
	for i := range m.Tensors {
		t := &m.Tensors[i]
		if t.Expert < 0 && t.TPDim >= 0 && t.Shape[t.TPDim]%int64(l.TP) != 0 {
			return fmt.Errorf("%w: %s: tensor %s dim %d (%d) not divisible by TP %d", ErrBadLayout, l, t.Name, t.TPDim, t.Shape[t.TPDim], l.TP)
		}
	}
	return nil
}

// stage is the pipeline stage holding layer (contiguous blocks; the first
// Layers mod PP stages take one extra layer).
func (l Layout) stage(m *Model, layer int) int {
	switch layer {
	case LayerEmbed:
		return 0
	case LayerHead:
		return l.PP - 1
	}
	per, extra := m.Layers/l.PP, m.Layers%l.PP
	if layer < extra*(per+1) {
		return layer / (per + 1)
	}
	return extra + (layer-extra*(per+1))/per
}

// holding is one rank's slab [lo, hi) of a tensor's split dimension.
type holding struct {
	rank   int
	lo, hi int64
}

// holders lists, for tensor t, every rank holding part of it, in rank order
// grouped by part: parts[k] are the replicas of the k-th slab.
func (l Layout) holders(m *Model, t *Tensor) (parts [][]holding) {
	pp := l.stage(m, t.Layer)
	_, _, extent := t.geometry()
	local := l.DP * l.TP
	base := l.Rank(pp, 0, 0)
	switch {
	case t.Expert >= 0:
		ep := t.Expert / (m.Experts / l.EP)
		var reps []holding
		for li := ep; li < local; li += l.EP {
			reps = append(reps, holding{rank: base + li, lo: 0, hi: extent})
		}
		return [][]holding{reps}
	case t.TPDim >= 0 && l.TP > 1:
		n := extent / int64(l.TP)
		parts = make([][]holding, l.TP)
		for tp := range l.TP {
			for dp := range l.DP {
				parts[tp] = append(parts[tp], holding{rank: l.Rank(pp, dp, tp), lo: int64(tp) * n, hi: int64(tp+1) * n})
			}
		}
		return parts
	default:
		reps := make([]holding, local)
		for li := range local {
			reps[li] = holding{rank: base + li, lo: 0, hi: extent}
		}
		return [][]holding{reps}
	}
}

// slot is rank's index in the flattened holders(t) list, or -1 when rank
// holds no part of t.
func (l Layout) slot(m *Model, t *Tensor, rank int) int {
	pp, dp, tp := l.Coords(rank)
	if rank < 0 || rank >= l.World() || pp != l.stage(m, t.Layer) {
		return -1
	}
	li := dp*l.TP + tp
	switch {
	case t.Expert >= 0:
		ep := t.Expert / (m.Experts / l.EP)
		if li%l.EP != ep {
			return -1
		}
		return li / l.EP
	case t.TPDim >= 0 && l.TP > 1:
		return tp*l.DP + dp
	default:
		return li
	}
}

// Offsets is where each rank stores each of its shards.
type Offsets struct {
	// Bytes held per rank.
	Bytes []int64
	// shard[tensor][slot] is the byte offset of that holder's shard.
	shard  [][]int64
	layout Layout
	model  *Model
}

// Offset returns the byte offset of tensor's shard in rank's buffer.
func (o *Offsets) Offset(tensor, rank int) (int64, bool) {
	s := o.layout.slot(o.model, &o.model.Tensors[tensor], rank)
	if s < 0 {
		return 0, false
	}
	return o.shard[tensor][s], true
}

// offsets lays out every rank's buffer: shards back to back in tensor order.
func (l Layout) offsets(m *Model) *Offsets {
	o := &Offsets{Bytes: make([]int64, l.World()), shard: make([][]int64, len(m.Tensors)), layout: l, model: m}
	for i := range m.Tensors {
		t := &m.Tensors[i]
		outer, inner, _ := t.geometry()
		parts := l.holders(m, t)
		offs := make([]int64, 0, len(parts)*len(parts[0]))
		for _, reps := range parts {
			for _, h := range reps {
				offs = append(offs, o.Bytes[h.rank])
				o.Bytes[h.rank] += outer * (h.hi - h.lo) * inner
			}
		}
		o.shard[i] = offs
	}
	return o
}

// Offsets lays out every rank's buffer for m (shards back to back in
// tensor order); callers use it to place their weights where a plan
// expects them.
func (l Layout) Offsets(m *Model) (*Offsets, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	if err := l.Validate(m); err != nil {
		return nil, err
	}
	return l.offsets(m), nil
}
