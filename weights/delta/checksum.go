package delta

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/zeebo/xxh3"
)

// XXH3Hex is the xxh3-128 digest of data as python-xxhash's
// xxh3_128(data).hexdigest() prints it, which is what SkyRL writes: the
// canonical big-endian form of the 128-bit value, high 64 bits first, as 32
// lowercase hex digits. zeebo/xxh3's Uint128.Bytes is that same canonical
// form (xxh3 of the empty input is 99aa06d3014798d86001c324468d497f).
func XXH3Hex(data []byte) string {
	b := xxh3.Hash128(data).Bytes()
	return hex.EncodeToString(b[:])
}

// Checksum returns the hex digest of data under algo ("xxh3-128" or
// "sha256").
func Checksum(algo string, data []byte) (string, error) {
	switch algo {
	case ChecksumXXH3:
		return XXH3Hex(data), nil
	case ChecksumSHA256:
		s := sha256.Sum256(data)
		return hex.EncodeToString(s[:]), nil
	}
	return "", fmt.Errorf("unknown checksum_algorithm %q (want %q or %q)", algo, ChecksumXXH3, ChecksumSHA256)
}

func checkChecksumField(algo, sum string) error {
	want := 0
	switch algo {
	case ChecksumXXH3:
		want = 32
	case ChecksumSHA256:
		want = 64
	default:
		return fmt.Errorf("unknown checksum_algorithm %q (want %q or %q)", algo, ChecksumXXH3, ChecksumSHA256)
	}
	if len(sum) != want {
		return fmt.Errorf("%s checksum %q: want %d hex digits", algo, sum, want)
	}
	if _, err := hex.DecodeString(sum); err != nil {
		return fmt.Errorf("%s checksum %q is not hex", algo, sum)
	}
	return nil
}
