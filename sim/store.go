package sim

import (
	"crypto/sha256"
	"encoding/binary"
	"sort"
	"time"

	"github.com/asyncrl/asyncrl/weights/delta"
)

// storedVersion is one version in the durable weight store (an S3 bucket
// or sync directory in the real system): its payload, and whether its
// manifest — which commits it — was written.
type storedVersion struct {
	payload    []byte
	sum        string
	manifest   bool
	at         time.Duration // when the manifest was committed
	deltaBytes int64
	fullBytes  int64
}

// weightStore survives every crash. Version 0 (the base checkpoint) is
// committed at the start.
type weightStore struct {
	versions map[int64]*storedVersion
	commits  []time.Duration // commits[v]: commit time of version v
}

func newWeightStore() *weightStore {
	s := &weightStore{versions: map[int64]*storedVersion{}}
	s.putPayload(0)
	s.commit(0, 0)
	return s
}

// payloadOf is version v's weights, abstracted to 64 bytes: what matters
// is that a flipped byte fails the real xxh3-128 checksum.
func payloadOf(v int64) []byte {
	var seed [8]byte
	binary.BigEndian.PutUint64(seed[:], uint64(v))
	a := sha256.Sum256(append([]byte("asyncrl-sim-weights-"), seed[:]...))
	b := sha256.Sum256(a[:])
	return append(a[:], b[:]...)
}

// checksumOf is the manifest checksum format of weights/delta.
func checksumOf(p []byte) string { return "xxh3-128:" + delta.XXH3Hex(p) }

// putPayload writes version v's payload files (not yet visible).
func (s *weightStore) putPayload(v int64) {
	if sv := s.versions[v]; sv != nil {
		return // re-publish after a crash rewrites the same bytes
	}
	p := payloadOf(v)
	sv := &storedVersion{payload: p, sum: checksumOf(p), deltaBytes: int64(1+v%4) << 20}
	if v%4 == 0 {
		sv.fullBytes = 8 << 20
	}
	s.versions[v] = sv
}

// commit writes version v's manifest: from now on it exists.
func (s *weightStore) commit(v int64, at time.Duration) {
	sv := s.versions[v]
	if sv == nil || sv.manifest || v != int64(len(s.commits)) {
		panic("sim: store commit out of order")
	}
	sv.manifest, sv.at = true, at
	s.commits = append(s.commits, at)
}

// committed reports whether version v's manifest exists.
func (s *weightStore) committed(v int64) bool {
	sv := s.versions[v]
	return sv != nil && sv.manifest
}

// latest is the newest committed version.
func (s *weightStore) latest() int64 { return int64(len(s.commits)) - 1 }

// latestAt is the newest version committed at or before t.
func (s *weightStore) latestAt(t time.Duration) int64 {
	i := sort.Search(len(s.commits), func(i int) bool { return s.commits[i] > t })
	return int64(i) - 1
}

// checksum is the manifest checksum of committed version v ("" if none).
func (s *weightStore) checksum(v int64) string {
	if sv := s.versions[v]; sv != nil && sv.manifest {
		return sv.sum
	}
	return ""
}
