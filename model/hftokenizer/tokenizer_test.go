package hftokenizer

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func load(t testing.TB, name string) *Tokenizer {
	t.Helper()
	tok, err := Load(filepath.Join("testdata", name, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// tokens spells ids as vocabulary strings, for readable failures.
func tokens(tok *Tokenizer, ids []int32) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i], _ = tok.Token(id)
	}
	return out
}

// Vectors from transformers tests/models/qwen2/test_tokenization_qwen2.py
// (huggingface/transformers@04bee35c8777d027a981e061f32fc12a1b3265d3): the
// fixture testdata/qwen2 is that test's vocabulary and merges.
func TestQwen2UpstreamVectors(t *testing.T) {
	tok := load(t, "qwen2")

	// test_python_full_tokenizer: NFC (U+03D2 U+0301 → U+03D3), digits split one
	// by one, ";}\n" merged with its newline, <|endoftext|> matched whole.
	in := "lower lower newer 010;}\n<|endoftext|>\u03d2\u0301"
	wantTokens := []string{"l", "o", "w", "er", "\u0120low", "er", "\u0120", "n", "e", "w", "er",
		"\u0120", "0", "1", "0", ";}\u010a", "<|endoftext|>", "\u00cf\u0135"}
	wantIDs := []int32{75, 78, 86, 260, 259, 260, 220, 77, 68, 86, 260, 220, 15, 16, 15, 266, 270, 267}
	got := tok.Encode(in)
	if !slices.Equal(got, wantIDs) {
		t.Errorf("Encode(%q)\n got  %v %q\n want %v %q", in, got, tokens(tok, got), wantIDs, wantTokens)
	}
	if gotT := tokens(tok, got); !slices.Equal(gotT, wantTokens) {
		t.Errorf("tokens: got %q, want %q", gotT, wantTokens)
	}
	// get_input_output_texts: the output text is the NFC form.
	if got, want := tok.Decode(got), "lower lower newer 010;}\n<|endoftext|>\u03d3"; got != want {
		t.Errorf("Decode = %q, want %q", got, want)
	}

	// test_slow_tokenizer_token_with_number_sign
	if got, want := tok.Encode(" ###"), []int32{268, 269}; !slices.Equal(got, want) {
		t.Errorf("Encode(\" ###\") = %v, want %v", got, want)
	}

	// test_slow_tokenizer_decode_spaces_between_special_tokens_default (<|im_start|> is 271 there too)
	if got, want := tok.Decode([]int32{259, 260, 270, 271, 26}), " lower<|endoftext|><|im_start|>;"; got != want {
		t.Errorf("Decode = %q, want %q", got, want)
	}
}

// Vectors from transformers tests/models/gpt2/test_tokenization_gpt2.py
// (huggingface/transformers@02185cfd15365229a58985c6ef385663def0b38b),
// tokenized with add_prefix_space=True; the vocabulary is not byte-complete.
func TestGPT2UpstreamVectors(t *testing.T) {
	tok := load(t, "gpt2")
	got := tok.Encode("lower newer")
	if want := []int32{14, 15, 10, 9, 3, 2, 15}; !slices.Equal(got, want) {
		t.Errorf("Encode = %v %q, want %v", got, tokens(tok, got), want)
	}
	if id, ok := tok.TokenID("<unk>"); !ok || id != 19 {
		t.Errorf("TokenID(<unk>) = %d, %v; want 19", id, ok)
	}
	// Bytes missing from the vocabulary become unk_token (tokenizers without fuse_unk).
	if got, want := tok.Encode("lz"), []int32{11, 19}; !slices.Equal(got, want) {
		t.Errorf("Encode(lz) = %v, want %v", got, want)
	}
	// add_prefix_space applies to each text segment between added tokens.
	if got, want := tok.Encode("low<|endoftext|>low"), []int32{14, 20, 14}; !slices.Equal(got, want) {
		t.Errorf("Encode = %v %q, want %v", got, tokens(tok, got), want)
	}
}

// The llama3 fixture is the Qwen2 vocabulary with the Llama-3 split pattern
// and ignore_merges: a word that is itself in the vocabulary is one token
// even when the merges cannot build it (tokenizers' BPE ignore_merges).
func TestLlama3IgnoreMergesAndDigits(t *testing.T) {
	qwen, llama := load(t, "qwen2"), load(t, "llama3")
	lowest, _ := llama.TokenID("\u0120lowest")
	if got := llama.Encode(" lowest"); !slices.Equal(got, []int32{lowest}) {
		t.Errorf("llama3 Encode(\" lowest\") = %q, want [Ġlowest]", tokens(llama, got))
	}
	if got := qwen.Encode(" lowest"); slices.Contains(got, lowest) {
		t.Errorf("qwen2 (no ignore_merges) Encode(\" lowest\") = %q, must merge to Ġlow e s t", tokens(qwen, got))
	}
	// "01" is a vocabulary entry: Qwen2 splits digits one by one so never uses
	// it; Llama-3's \p{N}{1,3} keeps "01" together and the merge applies.
	if got := tokens(qwen, qwen.Encode("01")); !slices.Equal(got, []string{"0", "1"}) {
		t.Errorf("qwen2 01 → %q", got)
	}
	if got := tokens(llama, llama.Encode("01")); !slices.Equal(got, []string{"01"}) {
		t.Errorf("llama3 01 → %q", got)
	}
}

func TestAddedTokens(t *testing.T) {
	tok := load(t, "qwen2")
	start, _ := tok.TokenID("<|im_start|>")
	end, _ := tok.TokenID("<|im_end|>")
	eot, _ := tok.TokenID("<|endoftext|>")
	if start != 271 || end != 272 || eot != 270 || !tok.IsSpecial(end) || tok.IsSpecial(75) {
		t.Fatalf("ids %d %d %d special(end)=%v special(75)=%v", start, end, eot, tok.IsSpecial(end), tok.IsSpecial(75))
	}
	text := "<|im_start|>user\nhi<|im_end|><|im_end|>x<|im_"
	ids := tok.Encode(text)
	if ids[0] != start || slices.Index(ids, end) < 0 || len(ids) < 4 || ids[len(ids)-1] == end {
		t.Errorf("Encode(%q) = %q", text, tokens(tok, ids))
	}
	if got := tok.Decode(ids); got != text {
		t.Errorf("Decode = %q, want %q", got, text)
	}
	if got, want := tok.DecodeSkipSpecial(ids), "user\nhix<|im_"; got != want {
		t.Errorf("DecodeSkipSpecial = %q, want %q", got, want)
	}
	if got := tok.VocabSize(); got != 273 {
		t.Errorf("VocabSize = %d, want 273", got)
	}
	// Ids outside the vocabulary are skipped, as tokenizers' decode does.
	if got := tok.Decode([]int32{-1, 75, 9999}); got != "l" {
		t.Errorf("Decode with unknown ids = %q", got)
	}
}

func TestAddedTokenOptions(t *testing.T) {
	data, err := os.ReadFile("testdata/qwen2/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(data), `"content": "<|im_end|>",
   "single_word": false,
   "lstrip": false,
   "rstrip": false`, `"content": "<|im_end|>",
   "single_word": false,
   "lstrip": true,
   "rstrip": true`, 1)
	s = strings.Replace(s, `"content": "<|im_start|>",
   "single_word": false`, `"content": "<|im_start|>",
   "single_word": true`, 1)
	if s == string(data) {
		t.Fatal("fixture layout changed; edit the replacements")
	}
	tok, err := Parse([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	// lstrip/rstrip absorb the surrounding whitespace into the token.
	if got, want := tok.Encode("l  <|im_end|>\n o"), []int32{75, 272, 78}; !slices.Equal(got, want) {
		t.Errorf("strip: got %q, want %v", tokens(tok, got), want)
	}
	// single_word: only between non-word characters.
	if got := tok.Encode("l<|im_start|>"); slices.Contains(got, 271) {
		t.Errorf("single_word matched inside a word: %q", tokens(tok, got))
	}
	if got := tok.Encode(" <|im_start|>."); !slices.Contains(got, 271) {
		t.Errorf("single_word not matched between spaces: %q", tokens(tok, got))
	}
}

func TestDecodeLossyUTF8(t *testing.T) {
	tok := load(t, "qwen2")
	// "€" is E2 82 AC; a truncated E2 82 is one maximal subpart → one U+FFFD
	// (Go's strings.ToValidUTF8 would also give one, but split invalid bytes
	// C3 28 must give U+FFFD then "(").
	ids := tok.Encode("€")
	if len(ids) != 3 {
		t.Fatalf("€ → %v", ids)
	}
	if got := tok.Decode(ids[:2]); got != "\uFFFD" {
		t.Errorf("truncated € = %q", got)
	}
	if got := tok.Decode(append(ids[:2:2], ids[:2]...)); got != "\uFFFD\uFFFD" {
		t.Errorf("two truncated € = %q, want two U+FFFD", got)
	}
	for _, c := range []struct{ in, want string }{
		{"\xc3\x28", "\uFFFD("},
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"}, // surrogate: ED then two bad continuations
		{"\xf0\x9f\x98", "\uFFFD"},
		{"\xff\xfe", "\uFFFD\uFFFD"},
		{"ok", "ok"},
	} {
		if got := lossyUTF8([]byte(c.in)); got != c.want {
			t.Errorf("lossyUTF8(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestLoadRejectsUnsupported(t *testing.T) {
	data, err := os.ReadFile("testdata/qwen2/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	base := string(data)
	cases := []struct{ name, old, new, want string }{
		{"normalizer", `"type": "NFC"`, `"type": "NFKC"`, "normalizer"},
		{"regex", `\\p{N}|`, `\\p{N}{1,2}|`, "Split regex"},
		{"decoder", `"decoder": {
  "type": "ByteLevel"`, `"decoder": {
  "type": "Metaspace"`, "decoder"},
		{"dropout", `"dropout": null`, `"dropout": 0.1`, "dropout"},
		{"byte_fallback", `"byte_fallback": false`, `"byte_fallback": true`, "byte_fallback"},
		{"merge out of vocab", `"e",
    "r"`, `"e",
    "q"`, "merges[3]"},
	}
	for _, c := range cases {
		s := strings.Replace(base, c.old, c.new, 1)
		if s == base {
			t.Fatalf("%s: replacement did not apply", c.name)
		}
		_, err := Parse([]byte(s))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one naming %q", c.name, err, c.want)
		}
		if c.name != "merge out of vocab" && !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: err %v does not wrap ErrUnsupported", c.name, err)
		}
	}
	if _, err := Load("testdata/nope/tokenizer.json"); err == nil {
		t.Error("Load of a missing file succeeded")
	}
}
