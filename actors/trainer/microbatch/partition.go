package microbatch

import (
	"cmp"
	"container/heap"
	"fmt"
	"slices"
)

// Cost estimates the work of one sequence of L tokens as Linear·L +
// Quadratic·L² (a FLOPs model: the MLP and projections are linear in L,
// attention quadratic). Tokens() is the plain token count.
type Cost struct {
	Linear    float64 `yaml:"linear"`
	Quadratic float64 `yaml:"quadratic"`
}

// Tokens is the cost model "one unit per token".
func Tokens() Cost { return Cost{Linear: 1} }

// FLOPs is the cost model a·L + b·L².
func FLOPs(a, b float64) Cost { return Cost{Linear: a, Quadratic: b} }

// Of is the cost of a sequence of l tokens.
func (c Cost) Of(l int) float64 {
	x := float64(l)
	return c.Linear*x + c.Quadratic*x*x
}

// Costs maps token counts through the model.
func (c Cost) Costs(tokens []int) []float64 {
	out := make([]float64, len(tokens))
	for i, t := range tokens {
		out[i] = c.Of(t)
	}
	return out
}

// Contiguous is SkyRL's split: k contiguous chunks of equal size (when n
// is not a multiple of k, the first n mod k chunks get one more).
func Contiguous(n, k int) [][]int {
	parts := make([][]int, k)
	i := 0
	for r := range k {
		size := n / k
		if r < n%k {
			size++
		}
		for range size {
			parts[r] = append(parts[r], i)
			i++
		}
	}
	return parts
}

// Greedy is longest-processing-time-first: sort by cost descending
// (stable) and give each item to the least-loaded part (ties: lowest
// index). It is the reference KarmarkarKarp is compared with.
func Greedy(costs []float64, k int) [][]int {
	parts := make([][]int, k)
	loads := make([]float64, k)
	order := make([]int, len(costs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(costs[b], costs[a]) })
	for _, i := range order {
		p := 0
		for q := range loads {
			if loads[q] < loads[p] {
				p = q
			}
		}
		parts[p] = append(parts[p], i)
		loads[p] += costs[i]
	}
	for _, p := range parts {
		slices.Sort(p)
	}
	return parts
}

// KarmarkarKarp is the k-way largest differencing method (as in verl's
// seqlen balancing). Each item starts as a partial solution with the item
// in one part; repeatedly the two solutions with the largest spread (max
// − min part sum) are merged by joining the heaviest part of one with the
// lightest of the other, and so on, until one solution remains. With
// equalSize every part gets the same number of items (len(costs) must be
// a multiple of k): items are dealt in sorted rows of k, one per part.
// Parts are returned with indices ascending; deterministic for equal
// inputs (ties broken by creation order).
func KarmarkarKarp(costs []float64, k int, equalSize bool) ([][]int, error) {
	if k < 1 {
		return nil, fmt.Errorf("%w: part count must be ≥ 1, got %d", ErrInvalid, k)
	}
	if equalSize && len(costs)%k != 0 {
		return nil, fmt.Errorf("%w: equal-size partition of %d items into %d parts", ErrInvalid, len(costs), k)
	}
	order := make([]int, len(costs))
	for i := range order {
		order[i] = i
	}
	// Ascending by cost, stable.
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(costs[a], costs[b]) })

	h := &kkHeap{}
	newState := func() *kkState {
		s := &kkState{parts: make([]kkPart, k), id: h.seq}
		h.seq++
		return s
	}
	if equalSize {
		for r := 0; r < len(order); r += k {
			s := newState()
			for j := range k {
				i := order[r+j]
				s.parts[j] = kkPart{sum: costs[i], items: []int{i}}
			}
			s.sort()
			heap.Push(h, s)
		}
	} else {
		for _, i := range order {
			s := newState()
			s.parts[0] = kkPart{sum: costs[i], items: []int{i}}
			heap.Push(h, s)
		}
	}
	if h.Len() == 0 {
		return make([][]int, k), nil
	}
	for h.Len() > 1 {
		a := heap.Pop(h).(*kkState)
		b := heap.Pop(h).(*kkState)
		// a and b are consumed: the merge reuses a's parts and item slices.
		for j := range k {
			pb := b.parts[k-1-j]
			a.parts[j].sum += pb.sum
			a.parts[j].items = append(a.parts[j].items, pb.items...)
		}
		a.id = h.seq
		h.seq++
		a.sort()
		heap.Push(h, a)
	}
	final := heap.Pop(h).(*kkState)
	out := make([][]int, k)
	for j, p := range final.parts {
		out[j] = p.items
		slices.Sort(out[j])
	}
	return out, nil
}

type kkPart struct {
	sum   float64
	items []int
}

type kkState struct {
	parts []kkPart // sum descending
	id    int
}

func (s *kkState) sort() {
	slices.SortStableFunc(s.parts, func(a, b kkPart) int { return cmp.Compare(b.sum, a.sum) })
}

func (s *kkState) spread() float64 { return s.parts[0].sum - s.parts[len(s.parts)-1].sum }

// kkHeap pops the largest spread first; equal spreads pop the older state.
type kkHeap struct {
	states []*kkState
	seq    int
}

func (h *kkHeap) Len() int { return len(h.states) }
func (h *kkHeap) Less(i, j int) bool {
	a, b := h.states[i], h.states[j]
	if a.spread() != b.spread() {
		return a.spread() > b.spread()
	}
	return a.id < b.id
}
func (h *kkHeap) Swap(i, j int) { h.states[i], h.states[j] = h.states[j], h.states[i] }
func (h *kkHeap) Push(x any)    { h.states = append(h.states, x.(*kkState)) }
func (h *kkHeap) Pop() any {
	old := h.states
	x := old[len(old)-1]
	h.states = old[:len(old)-1]
	return x
}

// Loads sums costs per part.
func Loads(costs []float64, parts [][]int) []float64 {
	out := make([]float64, len(parts))
	for p, idx := range parts {
		for _, i := range idx {
			out[p] += costs[i]
		}
	}
	return out
}

// Imbalance is max/mean of the part loads: 1 is perfect. All-zero loads
// (or no parts) count as perfectly balanced.
func Imbalance(loads []float64) float64 {
	if len(loads) == 0 {
		return 1
	}
	var sum, hi float64
	for _, l := range loads {
		sum += l
		hi = max(hi, l)
	}
	if sum == 0 {
		return 1
	}
	return hi / (sum / float64(len(loads)))
}
