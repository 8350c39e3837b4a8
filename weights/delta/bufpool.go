package delta

import "sync"

// bufPool recycles the per-tensor scratch buffers (compressed patch; for
// Apply also the decoded patch and current bytes) that Encode and Apply
// otherwise allocate for every tensor. Profiles showed those allocations
// costing a full extra pass over every tensor (the runtime zeroes each
// fresh buffer, which the XOR then overwrites) plus GC work proportional
// to the checkpoint; recycling keeps the passes to the ones the format
// needs. A GC empties the pool, so the first tensors after one still get
// fresh buffers: Encode therefore no longer needs a tensor-sized one
// (patchenc.go). Buffers are pointers to slices so Put does not allocate.
var bufPool sync.Pool

// getBuf returns a slice of length n, reused when a pooled one is big
// enough. Its contents are arbitrary: callers overwrite all n bytes.
func getBuf(n int) *[]byte {
	if p, ok := bufPool.Get().(*[]byte); ok {
		if cap(*p) >= n {
			*p = (*p)[:n]
			return p
		}
		// Too small for this tensor: drop it (the larger one replaces it in
		// the pool when put back) rather than keep growing the pool.
	}
	b := make([]byte, n)
	return &b
}

// putBuf returns a buffer to the pool; the caller must not touch it again.
func putBuf(p *[]byte) {
	if p == nil || cap(*p) == 0 {
		return
	}
	*p = (*p)[:0]
	bufPool.Put(p)
}
