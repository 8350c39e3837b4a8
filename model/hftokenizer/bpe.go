package hftokenizer

import "container/heap"

// merge is one BPE merge rule: the pair's rank (its line in the merges list)
// and the id of the merged token.
type merge struct {
	rank int32
	id   int32
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// symbol is one token of a word being merged; merged-away symbols have
// dead set, and live ones link to their live neighbours.
type symbol struct {
	id         int32
	prev, next int
	dead       bool
}

// candidate is a pair of adjacent symbols (pos and its next) that a merge
// rule would join.
type candidate struct {
	merge
	pos int
}

type candidates []candidate

func (c candidates) Len() int { return len(c) }
func (c candidates) Less(i, j int) bool {
	if c[i].rank != c[j].rank {
		return c[i].rank < c[j].rank
	}
	return c[i].pos < c[j].pos
}
func (c candidates) Swap(i, j int) { c[i], c[j] = c[j], c[i] }
func (c *candidates) Push(x any)   { *c = append(*c, x.(candidate)) }
func (c *candidates) Pop() any {
	old := *c
	x := old[len(old)-1]
	*c = old[:len(old)-1]
	return x
}

// bpe merges a word given as symbol ids and appends the result to dst. It
// applies the lowest-ranked applicable merge first, the leftmost among equal
// ranks, one merge at a time, re-evaluating the neighbours of each merge, as
// tokenizers' Word::merge_all does with its binary heap. Candidates whose
// symbols changed since they were queued are dropped when popped.
func bpe(dst []int32, ids []int32, merges map[uint64]merge) []int32 {
	if len(ids) < 2 {
		return append(dst, ids...)
	}
	syms := make([]symbol, len(ids))
	var q candidates
	for i, id := range ids {
		syms[i] = symbol{id: id, prev: i - 1, next: i + 1}
		if i > 0 {
			if m, ok := merges[pairKey(ids[i-1], id)]; ok {
				q = append(q, candidate{m, i - 1})
			}
		}
	}
	syms[len(syms)-1].next = -1
	heap.Init(&q)
	for q.Len() > 0 {
		c := heap.Pop(&q).(candidate)
		s := &syms[c.pos]
		if s.dead || s.next < 0 {
			continue
		}
		if m, ok := merges[pairKey(s.id, syms[s.next].id)]; !ok || m != c.merge {
			continue // stale: one side changed since this candidate was queued
		}
		right := &syms[s.next]
		right.dead = true
		s.id = c.id
		s.next = right.next
		if s.next >= 0 {
			syms[s.next].prev = c.pos
			if m, ok := merges[pairKey(s.id, syms[s.next].id)]; ok {
				heap.Push(&q, candidate{m, c.pos})
			}
		}
		if s.prev >= 0 {
			if m, ok := merges[pairKey(syms[s.prev].id, s.id)]; ok {
				heap.Push(&q, candidate{m, s.prev})
			}
		}
	}
	for i := 0; i >= 0; i = syms[i].next {
		dst = append(dst, syms[i].id)
	}
	return dst
}
