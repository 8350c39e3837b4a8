package hftokenizer

import (
	"unicode"
	"unicode/utf8"
)

// splitKind names one of the pre-tokenization regexes this package knows.
type splitKind int

const (
	splitNone     splitKind = iota // ByteLevel{use_regex: false} alone: the segment is one piece
	splitGPT2                      // GPT-2's ByteLevel regex
	splitLlama3                    // Llama-3 / cl100k: digits in runs of up to three
	splitQwen2                     // Qwen2 / Qwen2.5: every digit on its own
	splitDigits3                   // DeepSeek-V3's first Split: \p{N}{1,3}
	splitCJK                       // DeepSeek-V3's second Split: runs of CJK ideographs, hiragana, katakana
	splitDeepSeek                  // DeepSeek-V3's third Split: words, punctuation, whitespace
)

// The patterns exactly as they appear in tokenizer.json (after JSON decoding).
const (
	patternGPT2   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	patternLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patternQwen2  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

func (k splitKind) String() string {
	switch k {
	case splitNone:
		return "none"
	case splitGPT2:
		return "gpt2"
	case splitLlama3:
		return "llama3"
	case splitQwen2:
		return "qwen2"
	case splitDigits3:
		return "digits3"
	case splitCJK:
		return "cjk"
	case splitDeepSeek:
		return "deepseek"
	}
	return "unknown"
}

// Character classes of the patterns. An invalid UTF-8 byte decodes as
// (RuneError, 1) and falls in none of L, N or \s, like any symbol.
func isL(r rune) bool    { return unicode.IsLetter(r) }
func isN(r rune) bool    { return unicode.IsNumber(r) }
func isS(r rune) bool    { return unicode.Is(unicode.White_Space, r) }
func isCRLF(r rune) bool { return r == '\r' || r == '\n' }
func isP(r rune) bool    { return !isS(r) && !isL(r) && !isN(r) } // [^\s\p{L}\p{N}]

// at decodes the rune at byte offset i; past the end it returns (-1, 0).
func at(s string, i int) (rune, int) {
	if i >= len(s) {
		return -1, 0
	}
	return utf8.DecodeRuneInString(s[i:])
}

// scan returns the offset after the longest run of runes from i with class f,
// at most max runes when max > 0.
func scan(s string, i int, f func(rune) bool, max int) int {
	for n := 0; i < len(s) && (max <= 0 || n < max); n++ {
		r, w := at(s, i)
		if !f(r) {
			break
		}
		i += w
	}
	return i
}

// contractions of the patterns' first alternative, in pattern order.
var contractions = [...]string{"s", "t", "re", "ve", "m", "ll", "d"}

// contraction returns the length of the contraction suffix that s starts with
// (after the apostrophe), or 0. With fold the match is case-insensitive by
// Unicode simple case folding, as (?i:) is in Oniguruma and Python's regex
// (so "'ſ" matches like "'s").
func contraction(s string, fold bool) int {
	for _, c := range contractions {
		i, ok := 0, true
		for _, want := range c {
			r, w := at(s, i)
			if w == 0 || !(r == want || fold && foldEq(r, want)) {
				ok = false
				break
			}
			i += w
		}
		if ok {
			return i
		}
	}
	return 0
}

// foldEq reports whether r and want are in the same simple case-folding orbit.
func foldEq(r, want rune) bool {
	for f := unicode.SimpleFold(want); f != want; f = unicode.SimpleFold(f) {
		if f == r {
			return true
		}
	}
	return false
}

// pretokenize appends the pieces of s under kind to dst. The scanner tries
// the pattern's alternatives in order at each position, as the regex engine
// does (leftmost-first, greedy with backtracking); each branch below names
// the alternative it emulates. Every rune is L, N, \s or [^\s\p{L}\p{N}], and
// each class has an alternative that consumes at least that rune, so the
// scan always advances.
func pretokenize(dst []string, s string, kind splitKind) []string {
	switch kind {
	case splitNone:
		if s != "" {
			dst = append(dst, s)
		}
		return dst
	case splitDigits3, splitCJK, splitDeepSeek:
		return splitIsolated(dst, s, kind)
	}
	gpt2 := kind == splitGPT2
	for i := 0; i < len(s); {
		end := nextPiece(s, i, kind, gpt2)
		dst = append(dst, s[i:end])
		i = end
	}
	return dst
}

func nextPiece(s string, i int, kind splitKind, gpt2 bool) int {
	r, w := at(s, i)
	r2, _ := at(s, i+w)

	// '(?i:)?s|'t|'re|'ve|'m|'ll|'d
	if r == '\'' {
		if n := contraction(s[i+w:], !gpt2); n > 0 {
			return i + w + n
		}
	}
	if gpt2 {
		// ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`
		for _, f := range [...]func(rune) bool{isL, isN, isP} {
			if f(r) {
				return scan(s, i, f, 0)
			}
			if r == ' ' && f(r2) {
				return scan(s, i+w, f, 0)
			}
		}
	} else {
		// `[^\r\n\p{L}\p{N}]?\p{L}+`
		if isL(r) {
			return scan(s, i, isL, 0)
		}
		if !isCRLF(r) && !isN(r) && isL(r2) {
			return scan(s, i+w, isL, 0)
		}
		// `\p{N}` (Qwen2) or `\p{N}{1,3}` (Llama-3)
		if isN(r) {
			if kind == splitQwen2 {
				return i + w
			}
			return scan(s, i, isN, 3)
		}
		// ` ?[^\s\p{L}\p{N}]+[\r\n]*`
		if isP(r) {
			return scan(s, scan(s, i, isP, 0), isCRLF, 0)
		}
		if r == ' ' && isP(r2) {
			return scan(s, scan(s, i+w, isP, 0), isCRLF, 0)
		}
	}
	// Only whitespace is left: r is \s.
	if gpt2 {
		return trailingWhitespace(s, i, scan(s, i, isS, 0))
	}
	return matchWhitespace(s, i)
}
