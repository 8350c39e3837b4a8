package tokenizer

import "strings"

// Special token ids.
const (
	PAD int32 = 0
	BOS int32 = 1
	EOS int32 = 2

	firstChar = 0x20
	lastChar  = 0x7E
	offset    = 3
)

// VocabSize is the number of token ids: 3 specials + 95 printable characters.
const VocabSize = offset + lastChar - firstChar + 1

// Unknown is the id that characters outside printable ASCII map to ('?').
const Unknown int32 = int32('?'-firstChar) + offset

// ID returns the token id of a printable ASCII byte, or Unknown.
func ID(c byte) int32 {
	if c < firstChar || c > lastChar {
		return Unknown
	}
	return int32(c-firstChar) + offset
}

// Encode maps text to token ids (no BOS/EOS added).
func Encode(s string) []int32 {
	out := make([]int32, len(s))
	for i := 0; i < len(s); i++ {
		out[i] = ID(s[i])
	}
	return out
}

// Piece returns the text of one token; specials render as "" (PAD, BOS, EOS)
// and ids out of range as "".
func Piece(id int32) string {
	if id < offset || id >= VocabSize {
		return ""
	}
	return string(rune(id - offset + firstChar))
}

// Decode maps token ids back to text, dropping special tokens.
func Decode(ids []int32) string {
	var b strings.Builder
	b.Grow(len(ids))
	for _, id := range ids {
		if id >= offset && id < VocabSize {
			b.WriteByte(byte(id - offset + firstChar))
		}
	}
	return b.String()
}
