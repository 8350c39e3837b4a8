package hftokenizer

import (
	"strings"
	"unicode/utf8"
)

// byteToRune is GPT-2's bytes_to_unicode table: printable Latin-1 bytes map
// to themselves, the other 68 bytes to U+0100.. in increasing byte order, so
// every byte is one visible character (space is 'Ġ' U+0120, '\n' is 'Ċ').
var byteToRune [256]rune

// runeToByte inverts byteToRune; runes ≥ len are not in the alphabet.
var runeToByte [0x144]int16

func init() {
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = rune(256 + n)
			n++
		}
	}
	for i := range runeToByte {
		runeToByte[i] = -1
	}
	for b, r := range byteToRune {
		runeToByte[r] = int16(b)
	}
}

// byteLevel maps raw bytes to their byte-level characters.
func byteLevel(s string) string {
	var sb strings.Builder
	sb.Grow(2 * len(s))
	for i := 0; i < len(s); i++ {
		sb.WriteRune(byteToRune[s[i]])
	}
	return sb.String()
}

// appendTokenBytes appends the bytes a token stands for, as tokenizers'
// ByteLevel decoder does: every character mapped back through the byte
// alphabet, or, if any character is outside it, the token's own UTF-8 text.
func appendTokenBytes(dst []byte, tok string) []byte {
	start := len(dst)
	for _, r := range tok {
		if r < 0 || int(r) >= len(runeToByte) || runeToByte[r] < 0 {
			return append(dst[:start], tok...)
		}
		dst = append(dst, byte(runeToByte[r]))
	}
	return dst
}

// LossyString is the text of decoded bytes (e.g. AppendBytes' output): each
// maximal ill-formed subsequence becomes one U+FFFD, as Decode does.
func LossyString(b []byte) string { return lossyUTF8(b) }

// lossyUTF8 converts bytes to a string replacing each maximal subpart of an
// ill-formed sequence with one U+FFFD (Rust's String::from_utf8_lossy, the
// Unicode "substitution of maximal subparts" practice). Go's
// strings.ToValidUTF8 would replace a whole run of bad bytes with one.
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	sb.Grow(len(b) + 8)
	for i := 0; i < len(b); {
		r, w := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || w > 1 {
			sb.Write(b[i : i+w])
			i += w
			continue
		}
		i += maximalSubpart(b[i:])
		sb.WriteRune(utf8.RuneError)
	}
	return sb.String()
}

// maximalSubpart returns how many bytes of the ill-formed sequence at b[0]
// form one maximal subpart: a valid lead byte and the continuation bytes that
// are still allowed after it.
func maximalSubpart(b []byte) int {
	lo, hi := byte(0x80), byte(0xBF)
	var need int
	switch c := b[0]; {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c == 0xED:
		need, hi = 2, 0x9F
	case c >= 0xE1 && c <= 0xEF:
		need = 2
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	n := 1
	for k := 0; k < need && n < len(b); k++ {
		x := b[n]
		if k == 0 && (x < lo || x > hi) || k > 0 && (x < 0x80 || x > 0xBF) {
			break
		}
		n++
	}
	return n
}
