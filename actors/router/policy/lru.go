package policy

// prefixLRU remembers the last cap prefix hashes sent to one replica, with
// the logical time (a router-wide counter) each was last sent. It stands
// in for "this replica probably still has that prefix in its KV cache".
// A map plus an intrusive doubly linked list: O(1) touch and evict.
type prefixLRU struct {
	cap        int
	m          map[uint64]*lruNode
	head, tail *lruNode // head = most recent
}

type lruNode struct {
	key        uint64
	seq        uint64
	prev, next *lruNode
}

func newPrefixLRU(capacity int) *prefixLRU {
	return &prefixLRU{cap: capacity, m: make(map[uint64]*lruNode)}
}

// touch records that key was sent at logical time seq.
func (l *prefixLRU) touch(key, seq uint64) {
	if l.cap == 0 {
		return
	}
	if n, ok := l.m[key]; ok {
		n.seq = seq
		l.unlink(n)
		l.pushFront(n)
		return
	}
	var n *lruNode
	if len(l.m) >= l.cap {
		n = l.tail // reuse the evicted node
		l.unlink(n)
		delete(l.m, n.key)
		n.key, n.seq = key, seq
	} else {
		n = &lruNode{key: key, seq: seq}
	}
	l.m[key] = n
	l.pushFront(n)
}

// get returns when key was last sent here, if it is still remembered.
func (l *prefixLRU) get(key uint64) (uint64, bool) {
	n, ok := l.m[key]
	if !ok {
		return 0, false
	}
	return n.seq, true
}

func (l *prefixLRU) len() int { return len(l.m) }

func (l *prefixLRU) unlink(n *lruNode) {
	if n.prev != nil {
		n.prev.next = n.next
	} else {
		l.head = n.next
	}
	if n.next != nil {
		n.next.prev = n.prev
	} else {
		l.tail = n.prev
	}
	n.prev, n.next = nil, nil
}

func (l *prefixLRU) pushFront(n *lruNode) {
	n.next = l.head
	if l.head != nil {
		l.head.prev = n
	}
	l.head = n
	if l.tail == nil {
		l.tail = n
	}
}
