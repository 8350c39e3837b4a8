package hftokenizer

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
	"pgregory.net/rapid"
)

// genText draws strings mixing arbitrary runes with the pieces the
// tokenizers care about: added tokens, contractions, digit and space runs,
// newlines, merge-able letters.
func genText(t *rapid.T) string {
	parts := rapid.SliceOfN(rapid.OneOf(
		rapid.StringN(0, 6, -1),
		rapid.SampledFrom([]string{"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_", "'s", "'LL",
			" lower", " newer", "01", ";}\n", " ###", "  ", "\n\n", "\r\n", "\t", "2024", "\u03d3", "é", "中文", "🤗"}),
	), 0, 12).Draw(t, "parts")
	return strings.Join(parts, "")
}

// Decode(Encode(s)) == s for every NFC string on a byte-complete vocabulary
// (added tokens included), and every id is a known id.
func TestRoundTripProperty(t *testing.T) {
	for _, name := range []string{"qwen2", "llama3"} {
		tok := load(t, name)
		t.Run(name, rapid.MakeCheck(func(t *rapid.T) {
			s := norm.NFC.String(genText(t))
			ids := tok.Encode(s)
			for _, id := range ids {
				if _, ok := tok.Token(id); !ok {
					t.Fatalf("Encode(%q) produced unknown id %d", s, id)
				}
			}
			if got := tok.Decode(ids); got != s {
				t.Fatalf("Decode(Encode(%q)) = %q (ids %v)", s, got, ids)
			}
		}))
	}
}

// Invalid UTF-8 survives too: its bytes are encoded one by one.
func TestRoundTripInvalidUTF8(t *testing.T) {
	tok := load(t, "qwen2")
	rapid.Check(t, func(t *rapid.T) {
		b := rapid.SliceOfN(rapid.Byte(), 0, 24).Draw(t, "bytes")
		s := string(b)
		if utf8.ValidString(s) {
			s = norm.NFC.String(s)
		}
		if got := string(appendIDsBytes(tok, tok.Encode(s))); got != s {
			t.Fatalf("bytes of Encode(%q) = %q", s, got)
		}
	})
}

func appendIDsBytes(tok *Tokenizer, ids []int32) []byte {
	var b []byte
	for _, id := range ids {
		s, _ := tok.Token(id)
		b = appendTokenBytes(b, s)
	}
	return b
}

// naiveBPE is the textbook loop: repeatedly merge the lowest-ranked pair,
// the leftmost of equal ranks, rescanning the whole word each time.
func naiveBPE(ids []int32, merges map[uint64]merge) []int32 {
	w := slices.Clone(ids)
	for {
		best, at := merge{rank: -1}, -1
		for i := 0; i+1 < len(w); i++ {
			if m, ok := merges[pairKey(w[i], w[i+1])]; ok && (at < 0 || m.rank < best.rank) {
				best, at = m, i
			}
		}
		if at < 0 {
			return w
		}
		w = slices.Replace(w, at, at+2, best.id)
	}
}

// The heap-based bpe agrees with the naive loop on random words over the
// fixture's merge alphabet and on random merge tables.
func TestBPEMatchesNaive(t *testing.T) {
	tok := load(t, "qwen2")
	alphabet := []byte("lowernt01;}#\n Ï\x93")
	rapid.Check(t, func(t *rapid.T) {
		word := rapid.SliceOfN(rapid.SampledFrom(alphabet), 0, 30).Draw(t, "word")
		ids := make([]int32, len(word))
		for i, b := range word {
			ids[i] = tok.byteID[b]
		}
		if got, want := bpe(nil, ids, tok.merges), naiveBPE(ids, tok.merges); !slices.Equal(got, want) {
			t.Fatalf("word %q: bpe %v, naive %v", word, got, want)
		}
	})
	rapid.Check(t, func(t *rapid.T) {
		// Symbols 0..3; merges of random pairs to fresh ids with random ranks.
		merges := map[uint64]merge{}
		next := int32(4)
		for i, n := 0, rapid.IntRange(0, 12).Draw(t, "n"); i < n; i++ {
			a := rapid.Int32Range(0, next-1).Draw(t, "a")
			b := rapid.Int32Range(0, next-1).Draw(t, "b")
			if _, dup := merges[pairKey(a, b)]; dup {
				continue
			}
			merges[pairKey(a, b)] = merge{rank: int32(i), id: next}
			next++
		}
		ids := rapid.SliceOfN(rapid.Int32Range(0, 3), 0, 24).Draw(t, "ids")
		if got, want := bpe(nil, ids, merges), naiveBPE(ids, merges); !slices.Equal(got, want) {
			t.Fatalf("ids %v: bpe %v, naive %v", ids, got, want)
		}
	})
}
