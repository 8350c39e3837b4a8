package policy

import (
	"sort"
	"strconv"
)

// FNV-1a 64-bit (hash/fnv's algorithm, inlined so hashing a string does not
// allocate), followed by mix64 wherever the value is compared rather than
// just used as an identity. Ring points sit at RingHash("url#i"); keys at
// RingHash(key); rendezvous weights are mix64(FNV-1a("session_id:url")).
// Both are stable across processes and Go versions, so two routers with
// the same replica list agree on the ring.
const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// Hash64 is the FNV-1a 64-bit hash of s.
func Hash64(s string) uint64 {
	h := uint64(fnvOffset64)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime64
	}
	return h
}

// HashBytes is the FNV-1a 64-bit hash of b.
func HashBytes(b []byte) uint64 {
	h := uint64(fnvOffset64)
	for _, c := range b {
		h ^= uint64(c)
		h *= fnvPrime64
	}
	return h
}

// mix64 is the murmur3 fmix64 finaliser. FNV-1a alone maps strings that
// differ in one early byte ("http://b#7", "http://c#7") to correlated
// values, which clusters one replica's ring points next to another's; the
// finaliser spreads them (avalanche) and costs a few multiplies.
func mix64(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// RingHash is the position of s on the consistent-hash ring:
// mix64(FNV-1a-64(s)).
func RingHash(s string) uint64 { return mix64(Hash64(s)) }

// rendezvous is the weight of url for key: the hash of "key:url". The
// highest weight wins ties, so a tie is broken the same way by every
// router and independently of replica order.
func rendezvous(key, url string) uint64 {
	h := uint64(fnvOffset64)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= fnvPrime64
	}
	h ^= ':'
	h *= fnvPrime64
	for i := 0; i < len(url); i++ {
		h ^= uint64(url[i])
		h *= fnvPrime64
	}
	return mix64(h)
}

type ringPoint struct {
	hash uint64
	url  string
}

// buildRing places vnodes points per replica at Hash64("url#i").
func buildRing(urls []string, vnodes int) []ringPoint {
	ring := make([]ringPoint, 0, len(urls)*vnodes)
	for _, u := range urls {
		for i := 0; i < vnodes; i++ {
			ring = append(ring, ringPoint{hash: RingHash(u + "#" + strconv.Itoa(i)), url: u})
		}
	}
	sort.Slice(ring, func(i, j int) bool {
		if ring[i].hash != ring[j].hash {
			return ring[i].hash < ring[j].hash
		}
		return ring[i].url < ring[j].url
	})
	return ring
}

// ringStart is the index of the first point with hash ≥ h, wrapping to 0.
func ringStart(ring []ringPoint, h uint64) int {
	i := sort.Search(len(ring), func(i int) bool { return ring[i].hash >= h })
	if i == len(ring) {
		return 0
	}
	return i
}

// PrefixBlockHashes appends to dst the cumulative FNV-1a-64 hash of b's
// first k·block bytes for k = 1, 2, … while k·block ≤ len(b), at most
// maxBlocks of them (each |1, so never 0), in one pass over b. These are
// Request.PrefixBlocks: equal for two prompts exactly as far as their
// leading blocks are equal.
func PrefixBlockHashes(dst []uint64, b []byte, block, maxBlocks int) []uint64 {
	if block <= 0 {
		return dst
	}
	h := uint64(fnvOffset64)
	for k := 1; k <= maxBlocks && k*block <= len(b); k++ {
		for _, c := range b[(k-1)*block : k*block] {
			h ^= uint64(c)
			h *= fnvPrime64
		}
		dst = append(dst, h|1)
	}
	return dst
}
