package hftokenizer

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/text/unicode/norm"

	"github.com/asyncrl/asyncrl/internal/realtok"
)

// realTokenizers caches the three real tokenizers across tests (each takes
// about a second to load).
var realTokenizers sync.Map // name → *Tokenizer

func loadReal(t testing.TB, name string) *Tokenizer {
	t.Helper()
	dir := realtok.Dir(t, name)
	if tok, ok := realTokenizers.Load(name); ok {
		return tok.(*Tokenizer)
	}
	tok, err := Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatalf("load %s: %v", name, err)
	}
	realTokenizers.Store(name, tok)
	return tok
}

// referenceTexts: special tokens of each family, unicode (CJK, kana, Hangul,
// Arabic, Devanagari with combining marks, emoji with ZWJ and skin tones),
// digits in runs, whitespace runs (tabs, CRLF, trailing spaces,
// non-breaking spaces), contractions in both cases, code, and seeded random
// strings over all of those classes.
func referenceTexts() []string {
	texts := []string{
		"",
		"Hello World",
		"Hello, World! How's it going? I'M FINE, they'LL see.",
		"<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
		"<think>\nreasoning\n</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
		"<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
		"<｜begin▁of▁sentence｜>System<｜User｜>Hi<｜Assistant｜>Hello<｜end▁of▁sentence｜>",
		"<|endoftext|><|end_of_text|>",
		"0 1 12 123 1234 12345 1234567890 3.14159 $100.50 1,000,000 -42 3D 2nd 10x",
		"    four spaces\ttab\t\ttwo tabs\r\nCRLF\n\n\nthree newlines   \n  trailing   ",
		"   ",
		"\n",
		"a\u00a0b\u2003c\u3000d",
		"你好，世界！今天天气很好。日本語のテキスト、カタカナとひらがな。한국어 텍스트",
		"مرحبا بالعالم",
		"नमस्ते दुनिया",
		"e\u0301 \u00e9 n\u0303 \u1e9b\u0323",
		"🙂 👍🏽 👨‍👩‍👧 🇺🇸",
		"func main() {\n\tfmt.Println(\"hi\") // comment\n}\n",
		"def f(x):\n    return x**2  # square\n",
		"'s 't 're 've 'm 'll 'd 'S 'T 'RE",
		"...!!!???---___===+++",
		"http://example.com/path?q=1&r=2#frag",
		"x²+y³=z⁴ ½ ⅓ Ⅻ ①",
	}
	rng := rand.New(rand.NewPCG(29, 4))
	pools := []string{"a", "Z", "é", "ñ", "中", "文", "あ", "カ", "한", "ع", "ा", "\u0301", "1", "9", "٣", "²", " ", "  ", "\t", "\n", "\r\n", "\u00a0", ".", ",", "!", "'", "\"", "$", "+", "<", "|", "😀", "-", "_", "(", "s", "ll", "<|im_end|>", "<|eot_id|>", "<｜User｜>"}
	for n := 0; n < 300; n++ {
		var b strings.Builder
		for k := rng.IntN(24) + 1; k > 0; k-- {
			b.WriteString(pools[rng.IntN(len(pools))])
		}
		texts = append(texts, b.String())
	}
	return texts
}

// TestRealTokenizersMatchReference: for Qwen3, Llama-3.1 and DeepSeek-V3
// (the real tokenizer.json files .ci/tokenizers pins), Encode gives exactly
// the ids of Hugging Face's JavaScript tokenizers on every reference text.
// This is the check that the hand-written split scanners (including
// DeepSeek-V3's three-Split sequence), the BPE merges and the added-token
// matcher agree with an independent implementation of the same files.
func TestRealTokenizersMatchReference(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: loads three 10 MB tokenizers and runs Node")
	}
	module := realtok.ReferenceModule(t)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed: the reference tokenizer runs under Node.js ≥ 18 (bash .ci/node-deps installs Debian's nodejs), or set ASYNCRL_SKIP_REAL_TOKENIZERS=1")
	}
	texts := referenceTexts()
	in, _ := json.Marshal(texts)
	for _, name := range realtok.All {
		t.Run(name, func(t *testing.T) {
			tok := loadReal(t, name)
			cmd := exec.Command(node, filepath.Join("testdata", "reference.mjs"), module, realtok.Dir(t, name))
			cmd.Stdin = bytes.NewReader(in)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("reference tokenizer: %v\n%s", err, stderr.String())
			}
			var want [][]int32
			if err := json.Unmarshal(out, &want); err != nil || len(want) != len(texts) {
				t.Fatalf("reference output: %v (%d results for %d texts)", err, len(want), len(texts))
			}
			bad := 0
			for i, text := range texts {
				got := tok.Encode(text)
				if len(got) == 0 && len(want[i]) == 0 {
					continue
				}
				if !slices.Equal(got, want[i]) {
					bad++
					if bad <= 5 {
						t.Errorf("Encode(%q)\n got  %v %q\n want %v %q", text, got, tokens(tok, got), want[i], tokens(tok, want[i]))
					}
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d texts encode differently from the reference", bad, len(texts))
			}
		})
	}
}

// TestRealTokenizersRoundTrip: Decode(Encode(s)) == s for every reference
// text on each real tokenizer (all three are byte-complete byte-level BPEs
// with no NFC-changing or whitespace-stripping added tokens on these texts;
// Qwen3 normalises to NFC, so its texts are compared in NFC).
func TestRealTokenizersRoundTrip(t *testing.T) {
	for _, name := range realtok.All {
		tok := loadReal(t, name)
		for _, text := range referenceTexts() {
			want := text
			if tok.nfc {
				want = norm.NFC.String(text)
			}
			if got := tok.Decode(tok.Encode(text)); got != want {
				t.Errorf("%s: Decode(Encode(%q)) = %q", name, text, got)
			}
		}
	}
}

// TestRealSpecialTokenIDs pins the ids of the chat markers the templates use,
// as each model's tokenizer.json assigns them.
func TestRealSpecialTokenIDs(t *testing.T) {
	cases := []struct {
		name  string
		token string
		id    int32
	}{
		{realtok.Qwen3, "<|im_start|>", 151644},
		{realtok.Qwen3, "<|im_end|>", 151645},
		{realtok.Qwen3, "<|endoftext|>", 151643},
		{realtok.Qwen3, "<think>", 151667},
		{realtok.Llama31, "<|begin_of_text|>", 128000},
		{realtok.Llama31, "<|eot_id|>", 128009},
		{realtok.Llama31, "<|start_header_id|>", 128006},
		{realtok.DeepSeekV3, "<｜begin▁of▁sentence｜>", 0},
		{realtok.DeepSeekV3, "<｜end▁of▁sentence｜>", 1},
		{realtok.DeepSeekV3, "<｜User｜>", 128803},
		{realtok.DeepSeekV3, "<｜Assistant｜>", 128804},
	}
	// The post-processor's BOS: Llama-3's TemplateProcessing puts
	// <|begin_of_text|> first; Qwen3's and DeepSeek-V3's ByteLevel adds none
	// (DeepSeek-V3's BOS comes from add_bos_token, model/chattemplate).
	for name, want := range map[string][]int32{realtok.Qwen3: nil, realtok.Llama31: {128000}, realtok.DeepSeekV3: nil} {
		if got := loadReal(t, name).SpecialPrefix(); !slices.Equal(got, want) {
			t.Errorf("%s: SpecialPrefix() = %v, want %v", name, got, want)
		}
	}
	for _, c := range cases {
		tok := loadReal(t, c.name)
		id, ok := tok.TokenID(c.token)
		if !ok || id != c.id {
			t.Errorf("%s: TokenID(%q) = %d, %v; want %d", c.name, c.token, id, ok, c.id)
		}
		if got := tok.Encode("x" + c.token + "y"); len(got) != 3 || got[1] != c.id {
			t.Errorf("%s: Encode(x%sy) = %v, want the marker as one token %d", c.name, c.token, got, c.id)
		}
	}
}
