package hftokenizer

import (
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Tokenizer is a loaded byte-level BPE tokenizer. It is immutable after Load
// and safe for concurrent use.
type Tokenizer struct {
	nfc          bool
	splits       []splitKind // the Split pre-tokenizers, applied in sequence
	prefixSpace  bool        // ByteLevel add_prefix_space: prepend ' ' to each text segment
	ignoreMerges bool        // Llama-3: a whole word found in the vocab is one token

	vocab  map[string]int32
	merges map[uint64]merge
	byteID [256]int32 // id of each byte's one-character token, -1 if absent
	unk    int32      // unk_token id, -1 if none

	added        map[string]int // content → index in addedList
	addedList    []addedToken
	addedByFirst [256][]int // indices into addedList by first byte, longest first

	idToken []string // vocab token by id ("" where idKnown is false)
	idKnown []bool
	idAdded []int // index into addedList by id, -1 if not an added token

	postPrefix, postSuffix []int32 // TemplateProcessing's tokens around a single sequence
}

type addedToken struct {
	id                         int32
	content                    string
	singleWord, lstrip, rstrip bool
	special                    bool
}

// VocabSize is the number of id slots: one more than the largest id of the
// vocabulary and the added tokens. (A model's embedding table may be larger:
// Qwen2.5 pads to 151936 rows while its tokenizer's ids end at 151664.)
func (t *Tokenizer) VocabSize() int { return len(t.idToken) }

// TokenID returns the id of an added token's content (e.g. "<|im_end|>") or
// of a vocabulary entry in its byte-level spelling (e.g. "Ġhello").
func (t *Tokenizer) TokenID(s string) (int32, bool) {
	if i, ok := t.added[s]; ok {
		return t.addedList[i].id, true
	}
	id, ok := t.vocab[s]
	return id, ok
}

// Token returns the string of an id: an added token's content or the
// vocabulary entry in its byte-level spelling.
func (t *Tokenizer) Token(id int32) (string, bool) {
	if id < 0 || int(id) >= len(t.idToken) || !t.idKnown[id] {
		return "", false
	}
	if a := t.idAdded[id]; a >= 0 {
		return t.addedList[a].content, true
	}
	return t.idToken[id], true
}

// IsSpecial reports whether id is an added token marked special (e.g.
// <|endoftext|>, <|im_end|>).
func (t *Tokenizer) IsSpecial(id int32) bool {
	if id < 0 || int(id) >= len(t.idAdded) {
		return false
	}
	a := t.idAdded[id]
	return a >= 0 && t.addedList[a].special
}

// IsAdded reports whether id is an added token (special or not, e.g.
// <|im_end|> and <think>): its Token is its literal text.
func (t *Tokenizer) IsAdded(id int32) bool {
	return id >= 0 && int(id) < len(t.idAdded) && t.idAdded[id] >= 0
}

// Encode turns text into token ids. It adds no BOS/EOS (see the package doc).
func (t *Tokenizer) Encode(text string) []int32 {
	var ids []int32
	var pieces, scratch []string
	var sym []int32
	segment := func(s string) {
		if s == "" {
			return
		}
		if t.nfc && !norm.NFC.IsNormalString(s) {
			s = norm.NFC.String(s)
		}
		if t.prefixSpace && s[0] != ' ' {
			s = " " + s
		}
		pieces, scratch = pretokenizeSeq(pieces[:0], s, t.splits, scratch)
		for _, p := range pieces {
			if t.ignoreMerges {
				if id, ok := t.vocab[byteLevel(p)]; ok {
					ids = append(ids, id)
					continue
				}
			}
			sym = sym[:0]
			for i := 0; i < len(p); i++ {
				switch id := t.byteID[p[i]]; {
				case id >= 0:
					sym = append(sym, id)
				case t.unk >= 0:
					sym = append(sym, t.unk)
				}
				// else: dropped, as tokenizers does without an unk_token
			}
			ids = bpe(ids, sym, t.merges)
		}
	}
	start := 0 // start of the pending text segment
	for i := 0; i < len(text); {
		a, mStart, mEnd, skip := t.matchAdded(text, i, start)
		if a < 0 {
			i += skip
			continue
		}
		segment(text[start:mStart])
		ids = append(ids, t.addedList[a].id)
		start, i = mEnd, mEnd
	}
	segment(text[start:])
	return ids
}

// matchAdded looks for an added token starting at byte i (leftmost-longest).
// It returns the token's index and the span it consumes (widened by
// lstrip/rstrip whitespace, never before segStart), or a < 0 and how far to
// advance: past a rejected single_word match, as an Aho-Corasick scan would,
// else one byte.
func (t *Tokenizer) matchAdded(text string, i, segStart int) (a, start, end, skip int) {
	for _, k := range t.addedByFirst[text[i]] {
		tok := &t.addedList[k]
		if len(text)-i < len(tok.content) || text[i:i+len(tok.content)] != tok.content {
			continue
		}
		start, end = i, i+len(tok.content)
		if tok.singleWord {
			before, _ := utf8.DecodeLastRuneInString(text[:start])
			after, _ := utf8.DecodeRuneInString(text[end:])
			if start > 0 && isWordChar(before) || end < len(text) && isWordChar(after) {
				return -1, 0, 0, len(tok.content)
			}
		}
		if tok.lstrip {
			for start > segStart {
				r, w := utf8.DecodeLastRuneInString(text[segStart:start])
				if !unicode.IsSpace(r) {
					break
				}
				start -= w
			}
		}
		if tok.rstrip {
			for end < len(text) {
				r, w := utf8.DecodeRuneInString(text[end:])
				if !unicode.IsSpace(r) {
					break
				}
				end += w
			}
		}
		return k, start, end, 0
	}
	return -1, 0, 0, 1
}

func isWordChar(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) }

// AppendBytes appends the bytes id stands for (an added token's text, a
// vocabulary token's bytes) without making them valid UTF-8: a character
// split across tokens comes out whole once all its tokens are appended, so
// an incremental decoder (the engine's) appends token by token and converts
// once. Unknown ids append nothing.
func (t *Tokenizer) AppendBytes(dst []byte, id int32) []byte {
	tok, ok := t.Token(id)
	if !ok {
		return dst
	}
	return appendTokenBytes(dst, tok)
}

// Decode turns ids back into text, special tokens included (tokenizers'
// decode with skip_special_tokens=False). Unknown ids are skipped.
func (t *Tokenizer) Decode(ids []int32) string { return t.decode(ids, false) }

// DecodeSkipSpecial is Decode without special added tokens, the text vLLM
// returns by default (skip_special_tokens=True): what a reward usually reads.
func (t *Tokenizer) DecodeSkipSpecial(ids []int32) string { return t.decode(ids, true) }

func (t *Tokenizer) decode(ids []int32, skipSpecial bool) string {
	buf := make([]byte, 0, 4*len(ids))
	for _, id := range ids {
		if skipSpecial && t.IsSpecial(id) {
			continue
		}
		if tok, ok := t.Token(id); ok {
			buf = appendTokenBytes(buf, tok)
		}
	}
	return lossyUTF8(buf)
}
