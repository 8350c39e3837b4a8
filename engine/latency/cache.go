package latency

// blockPool is the KV cache: CacheBlocks blocks, a refcount each, a map from
// prefix key to block for full blocks, and a free queue of unreferenced
// blocks in eviction order (head = next to reuse).
type blockPool struct {
	blocks []block
	byKey  map[uint64]int32
	head   int32 // free queue, -1 when empty
	tail   int32
	nFree  int // blocks with ref == 0
	evicts int64
}

type block struct {
	key        uint64
	keyed      bool
	ref        int
	prev, next int32 // free-queue links, -1 at the ends; only when ref == 0
	queued     bool
}

func newBlockPool(n int) *blockPool {
	p := &blockPool{blocks: make([]block, n), byKey: make(map[uint64]int32), head: -1, tail: -1}
	for i := range p.blocks {
		p.blocks[i].prev, p.blocks[i].next = -1, -1
		p.pushTail(int32(i))
	}
	p.nFree = n
	return p
}

func (p *blockPool) unlink(i int32) {
	b := &p.blocks[i]
	if b.prev >= 0 {
		p.blocks[b.prev].next = b.next
	} else {
		p.head = b.next
	}
	if b.next >= 0 {
		p.blocks[b.next].prev = b.prev
	} else {
		p.tail = b.prev
	}
	b.prev, b.next, b.queued = -1, -1, false
}

func (p *blockPool) pushTail(i int32) {
	b := &p.blocks[i]
	b.prev, b.next, b.queued = p.tail, -1, true
	if p.tail >= 0 {
		p.blocks[p.tail].next = i
	} else {
		p.head = i
	}
	p.tail = i
}

func (p *blockPool) pushHead(i int32) {
	b := &p.blocks[i]
	b.prev, b.next, b.queued = -1, p.head, true
	if p.head >= 0 {
		p.blocks[p.head].prev = i
	} else {
		p.tail = i
	}
	p.head = i
}

// lookup returns the cached block holding the prefix named by key.
func (p *blockPool) lookup(key uint64) (int32, bool) {
	i, ok := p.byKey[key]
	return i, ok
}

// acquire takes a reference on a cached block (a prefix hit).
func (p *blockPool) acquire(i int32) {
	b := &p.blocks[i]
	if b.ref == 0 {
		p.unlink(i)
		p.nFree--
	}
	b.ref++
}

// alloc takes the head of the free queue, evicting its cached contents.
func (p *blockPool) alloc() (int32, bool) {
	i := p.head
	if i < 0 {
		return -1, false
	}
	p.unlink(i)
	p.nFree--
	b := &p.blocks[i]
	if b.keyed {
		delete(p.byKey, b.key)
		b.keyed = false
		p.evicts++
	}
	b.ref = 1
	return i, true
}

// release drops one reference. A block that becomes unreferenced keeps its
// cached prefix and joins the tail of the eviction queue; an unkeyed one
// holds nothing worth keeping and goes to the head to be reused first.
func (p *blockPool) release(i int32) {
	b := &p.blocks[i]
	if b.ref <= 0 {
		panic("latency: release of an unreferenced block")
	}
	b.ref--
	if b.ref > 0 {
		return
	}
	p.nFree++
	if b.keyed {
		p.pushTail(i)
	} else {
		p.pushHead(i)
	}
}

// publish makes block i findable under key unless another block already
// holds that prefix (then i stays private, as a duplicate).
func (p *blockPool) publish(i int32, key uint64) {
	if _, dup := p.byKey[key]; dup {
		return
	}
	b := &p.blocks[i]
	b.key, b.keyed = key, true
	p.byKey[key] = i
}

// reset forgets every cached prefix; referenced blocks stay allocated.
func (p *blockPool) reset() {
	for i := range p.blocks {
		p.blocks[i].keyed = false
	}
	clear(p.byKey)
}

func (p *blockPool) used() int { return len(p.blocks) - p.nFree }

// chainKey extends a prefix key by one block of tokens (FNV-1a over the
// previous key, the salt and the token ids).
func chainKey(prev, salt uint64, toks []int32) uint64 {
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	mix := func(v uint64) {
		for k := 0; k < 8; k++ {
			h ^= v & 0xff
			h *= prime
			v >>= 8
		}
	}
	mix(prev)
	mix(salt)
	for _, t := range toks {
		mix(uint64(uint32(t)))
	}
	return h
}
