package hftokenizer

import (
	"encoding/json"
	"os"
	"slices"
	"testing"
)

// TestPretokenizeMatchesRegex checks the hand-written scanners against the
// splits Python's regex module produces for the very pattern strings
// (testdata/pretok.json, made by testdata/gen.py): hand-picked cases for
// contractions, digits, whitespace runs, newlines, CJK and emoji, and 300
// seeded random strings over those classes.
func TestPretokenizeMatchesRegex(t *testing.T) {
	data, err := os.ReadFile("testdata/pretok.json")
	if err != nil {
		t.Fatal(err)
	}
	var golden struct {
		Cases []struct {
			Pattern string   `json:"pattern"`
			Text    string   `json:"text"`
			Pieces  []string `json:"pieces"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(data, &golden); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]splitKind{"qwen2": splitQwen2, "llama3": splitLlama3, "gpt2": splitGPT2}
	seen := map[string]int{}
	for _, c := range golden.Cases {
		kind, ok := kinds[c.Pattern]
		if !ok {
			t.Fatalf("unknown pattern %q", c.Pattern)
		}
		seen[c.Pattern]++
		got := pretokenize(nil, c.Text, kind)
		want := c.Pieces
		if want == nil {
			want = []string{}
		}
		if got == nil {
			got = []string{}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s %q:\n got  %q\n want %q", c.Pattern, c.Text, got, want)
		}
	}
	for p := range kinds {
		if seen[p] < 300 {
			t.Errorf("pattern %s: only %d golden cases", p, seen[p])
		}
	}
}

// TestPretokenizeQwen2Cases spells out the Qwen2 behaviours the rollouts rely
// on (the same strings are in pretok.json, checked against the regex there).
func TestPretokenizeQwen2Cases(t *testing.T) {
	cases := []struct {
		in   string
		want []string
	}{
		{"we'll DON'T", []string{"we", "'ll", " DON", "'T"}},   // contractions, any case
		{"x 2024", []string{"x", " ", "2", "0", "2", "4"}},     // one digit per piece
		{"a   word", []string{"a", "  ", " word"}},             // a space run leaves one space to the word
		{"a\n\n  b", []string{"a", "\n\n", " ", " b"}},         // newline run, then spaces before a word
		{"end;}\n", []string{"end", ";}\n"}},                   // punctuation keeps its trailing newline
		{"tail  ", []string{"tail", "  "}},                     // trailing whitespace is one piece
		{"\tx", []string{"\tx"}},                               // one non-newline space char prefixes a word
		{"<|im_start|>", []string{"<|", "im", "_start", "|>"}}, // (added tokens are matched before this)
	}
	for _, c := range cases {
		if got := pretokenize(nil, c.in, splitQwen2); !slices.Equal(got, c.want) {
			t.Errorf("%q: got %q, want %q", c.in, got, c.want)
		}
	}
	if got, want := pretokenize(nil, "x 2024", splitLlama3), []string{"x", " ", "202", "4"}; !slices.Equal(got, want) {
		t.Errorf("llama3 digits: got %q, want %q", got, want)
	}
}
