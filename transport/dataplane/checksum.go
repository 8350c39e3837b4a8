package dataplane

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"sort"
	"strings"

	"github.com/zeebo/xxh3"

	"github.com/asyncrl/asyncrl/messages"
)

// Algorithm names a range checksum. xxh3 (64-bit) is the default: it runs at
// memory speed, so verifying a range costs far less than moving it. crc32c
// (Castagnoli, hardware-accelerated in the stdlib) is accepted for peers
// that only have a CRC.
type Algorithm string

const (
	XXH3   Algorithm = "xxh3"
	CRC32C Algorithm = "crc32c"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// NewHash returns a streaming hash for a.
func NewHash(a Algorithm) (hash.Hash, error) {
	switch a {
	case XXH3:
		return xxh3.New(), nil
	case CRC32C:
		return crc32.New(castagnoli), nil
	}
	return nil, fmt.Errorf("%w: unknown checksum algorithm %q (want xxh3 or crc32c)", ErrBadPlan, a)
}

// Sum returns the checksum string of data, e.g. "xxh3:0123456789abcdef".
func Sum(a Algorithm, data []byte) string {
	switch a {
	case CRC32C:
		return format(a, uint64(crc32.Checksum(data, castagnoli)), 4)
	default:
		return format(XXH3, xxh3.Hash(data), 8)
	}
}

func format(a Algorithm, v uint64, size int) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return string(a) + ":" + hex.EncodeToString(b[8-size:])
}

// Checker verifies a checksum string over bytes fed in order, possibly
// across several calls (a range resumed after a broken connection keeps its
// Checker, so the bytes before the break are not re-read).
type Checker struct {
	want string
	alg  Algorithm
	h    hash.Hash
}

// NewChecker parses spec ("alg:hex"); an empty spec yields a Checker that
// accepts anything.
func NewChecker(spec string) (*Checker, error) {
	if spec == "" {
		return &Checker{}, nil
	}
	alg, hexPart, ok := strings.Cut(spec, ":")
	if !ok {
		return nil, fmt.Errorf("%w: checksum %q is not alg:hex", ErrBadPlan, spec)
	}
	h, err := NewHash(Algorithm(alg))
	if err != nil {
		return nil, err
	}
	if len(hexPart) != 2*h.Size() {
		return nil, fmt.Errorf("%w: checksum %q: want %d hex digits", ErrBadPlan, spec, 2*h.Size())
	}
	if _, err := hex.DecodeString(hexPart); err != nil {
		return nil, fmt.Errorf("%w: checksum %q: %v", ErrBadPlan, spec, err)
	}
	return &Checker{want: strings.ToLower(spec), alg: Algorithm(alg), h: h}, nil
}

// Write feeds bytes; it never fails.
func (c *Checker) Write(p []byte) (int, error) {
	if c.h != nil {
		c.h.Write(p)
	}
	return len(p), nil
}

// Verify reports ErrChecksum unless the bytes written so far match.
func (c *Checker) Verify() error {
	if c.h == nil {
		return nil
	}
	got := string(c.alg) + ":" + hex.EncodeToString(c.h.Sum(nil))
	if got != c.want {
		return fmt.Errorf("%w: got %s, want %s", ErrChecksum, got, c.want)
	}
	return nil
}

// SplitRanges cuts [0, size) into ranges of at most chunk bytes named name,
// without checksums (see Checksum). Smaller ranges give parallel streams
// more to share and make a resumed or re-fetched range cheaper; larger ones
// cost fewer requests.
func SplitRanges(name string, size, chunk int64) []messages.ByteRange {
	if chunk <= 0 {
		chunk = size
	}
	var out []messages.ByteRange
	for off := int64(0); off < size; off += chunk {
		out = append(out, messages.ByteRange{Name: name, Offset: off, Length: min(chunk, size-off)})
	}
	return out
}

// Checksum fills every range's Checksum from src with algorithm a.
func Checksum(src io.ReaderAt, ranges []messages.ByteRange, a Algorithm) error {
	if s, ok := src.(Slicer); ok {
		for i := range ranges {
			b, err := s.Slice(ranges[i].Offset, ranges[i].Length)
			if err != nil {
				return &RangeError{Index: i, Range: ranges[i], Err: err}
			}
			ranges[i].Checksum = Sum(a, b)
		}
		return nil
	}
	for i := range ranges {
		h, err := NewHash(a)
		if err != nil {
			return err
		}
		if _, err := io.Copy(h, io.NewSectionReader(src, ranges[i].Offset, ranges[i].Length)); err != nil {
			return &RangeError{Index: i, Range: ranges[i], Err: err}
		}
		ranges[i].Checksum = string(a) + ":" + hex.EncodeToString(h.Sum(nil))
	}
	return nil
}

// ValidateRanges checks that ranges are non-negative, non-empty, do not
// overlap and carry parseable checksums; it returns the end of the byte
// space they span.
func ValidateRanges(ranges []messages.ByteRange) (end int64, err error) {
	idx := make([]int, len(ranges))
	for i, r := range ranges {
		idx[i] = i
		if r.Offset < 0 || r.Length <= 0 {
			return 0, &RangeError{Index: i, Range: r, Err: fmt.Errorf("%w: offset must be >= 0 and length > 0", ErrBadPlan)}
		}
		if _, err := NewChecker(r.Checksum); err != nil {
			return 0, &RangeError{Index: i, Range: r, Err: err}
		}
		end = max(end, r.Offset+r.Length)
	}
	sort.Slice(idx, func(a, b int) bool { return ranges[idx[a]].Offset < ranges[idx[b]].Offset })
	for k := 1; k < len(idx); k++ {
		prev, cur := ranges[idx[k-1]], ranges[idx[k]]
		if prev.Offset+prev.Length > cur.Offset {
			return 0, &RangeError{Index: idx[k], Range: cur, Err: fmt.Errorf("%w: overlaps range %d (%s)", ErrBadPlan, idx[k-1], prev.String())}
		}
	}
	return end, nil
}
