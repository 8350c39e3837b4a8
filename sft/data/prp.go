package data

import "math/bits"

// mix64 is SplitMix64's finalizer: a bijective avalanche on 64 bits.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// hash3 is a counter-based random number: the same (seed, a, b) always
// gives the same value, so a sampler's draw k needs no history, only k.
func hash3(seed, a, b uint64) uint64 {
	return mix64(mix64(seed^0x9e3779b97f4a7c15+a*0xd6e8feb86659fd93) ^ b*0xa0761d6478bd642f)
}

// unit maps a random word to [0, 1).
func unit(x uint64) float64 { return float64(x>>11) * (1.0 / (1 << 53)) }

// below maps a random word to [0, n) (Lemire's multiply-shift; the bias is
// at most n/2^64).
func below(x, n uint64) uint64 {
	hi, _ := bits.Mul64(x, n)
	return hi
}

// feistelRounds: four rounds of a balanced Feistel network with a strong
// round function are a pseudo-random permutation (Luby–Rackoff); six give
// margin for the small domains a tiny dataset has.
const feistelRounds = 6

// Perm is a seeded pseudo-random permutation of [0, N) in O(1) memory: a
// Feistel network on the smallest even-bit power-of-two domain ≥ N, with
// cycle walking (re-encrypt until the value falls inside [0, N); the
// domain is < 4N, so fewer than 4 rounds trips are expected). At(i) for
// i in [0, N) visits every value of [0, N) exactly once.
type Perm struct {
	n    uint64
	half uint
	mask uint64
	keys [feistelRounds]uint64
}

// NewPerm returns the permutation of [0, n) keyed by seed.
func NewPerm(n, seed uint64) Perm {
	p := Perm{n: n, half: 1}
	for p.half < 32 && uint64(1)<<(2*p.half) < n {
		p.half++
	}
	p.mask = 1<<p.half - 1
	for r := range p.keys {
		p.keys[r] = hash3(seed, 0x5045524d, uint64(r))
	}
	return p
}

// Len is N.
func (p Perm) Len() uint64 { return p.n }

// At is the i-th element of the permutation; i must be < N.
func (p Perm) At(i uint64) uint64 {
	x := i
	for {
		x = p.encrypt(x)
		if x < p.n {
			return x
		}
	}
}

func (p Perm) encrypt(x uint64) uint64 {
	l, r := x>>p.half, x&p.mask
	for _, k := range p.keys {
		l, r = r, l^(mix64(r^k)&p.mask)
	}
	return l<<p.half | r
}
