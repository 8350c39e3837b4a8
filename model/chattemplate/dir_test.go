package chattemplate

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/internal/realtok"
)

// tokDir writes a tokenizer directory around the small Qwen2-style fixture
// of model/hftokenizer (ids: <|endoftext|> 270, <|im_start|> 271,
// <|im_end|> 272) with the given extra files.
func tokDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	b, err := os.ReadFile(filepath.Join("..", "hftokenizer", "testdata", "qwen2", "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const chatML = `{% for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}`

func userMsg(t *testing.T, text string) json.RawMessage {
	t.Helper()
	m, err := MarshalMessages(Message{Role: "user", Content: text})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestLoadDirConfigForms(t *testing.T) {
	cfg := map[string]any{
		"chat_template": []map[string]string{
			{"name": "default", "template": chatML},
			{"name": "tool_use", "template": "TOOLS{{ tools | length }}" + chatML},
		},
		"bos_token":                 map[string]any{"__type": "AddedToken", "content": "<|im_start|>", "lstrip": false},
		"eos_token":                 map[string]any{"content": "<|im_end|>"},
		"pad_token":                 nil,
		"additional_special_tokens": []any{"<|endoftext|>", map[string]any{"content": "<|im_end|>"}},
		"add_bos_token":             true,
	}
	b, _ := json.Marshal(cfg)
	dir := tokDir(t, map[string]string{
		"tokenizer_config.json":   string(b),
		"special_tokens_map.json": `{"eos_token": "<|endoftext|>"}`,
		"generation_config.json":  `{"bos_token_id": 271, "eos_token_id": [272, 270]}`,
	})
	tok, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.TemplateNames(); !slices.Equal(got, []string{"default", "tool_use"}) {
		t.Errorf("templates %v", got)
	}
	if tok.Special["bos_token"] != "<|im_start|>" || tok.Special["eos_token"] != "<|endoftext|>" {
		t.Errorf("special %v: want bos from the AddedToken object, eos overridden by special_tokens_map.json", tok.Special)
	}
	if _, ok := tok.Special["pad_token"]; ok {
		t.Errorf("a null pad_token must be absent: %v", tok.Special)
	}
	if got := tok.Special["additional_special_tokens"]; len(got.([]any)) != 2 {
		t.Errorf("additional_special_tokens %v", got)
	}
	if !tok.AddBOS || !slices.Equal(tok.BOSPrefix, []int32{271}) {
		t.Errorf("AddBOS %v %v, want true [271]", tok.AddBOS, tok.BOSPrefix)
	}
	if !slices.Equal(tok.EOS, []int32{272, 270}) || !tok.IsEOS(270) || tok.IsEOS(271) {
		t.Errorf("EOS %v, want generation_config's [272 270]", tok.EOS)
	}
	// Tools select tool_use; no tools select default; a name wins.
	in := Input{Messages: userMsg(t, "hi"), AddGenerationPrompt: true}
	plain, err := tok.Render("", in)
	if err != nil || plain != "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n" {
		t.Errorf("default render %q, %v", plain, err)
	}
	in.Tools = json.RawMessage(`[{"type": "function", "function": {"name": "f"}}]`)
	withTools, err := tok.Render("", in)
	if err != nil || !strings.HasPrefix(withTools, "TOOLS1<|im_start|>") {
		t.Errorf("tool_use render %q, %v", withTools, err)
	}
	if _, err := tok.Render("missing", in); !errors.Is(err, ErrNoTemplate) || !strings.Contains(err.Error(), "default, tool_use") {
		t.Errorf("unknown template name: %v", err)
	}
	ids, text, err := tok.RenderIDs("default", Input{Messages: userMsg(t, "hi")})
	if err != nil || ids[0] != 271 || ids[len(ids)-2] != 272 || text != "<|im_start|>user\nhi<|im_end|>\n" {
		t.Errorf("RenderIDs %v %q %v", ids, text, err)
	}
}

// chat_template.jinja wins over tokenizer_config.json's chat_template, and
// its trailing newline is dropped as jinja2 drops it.
func TestLoadDirJinjaFile(t *testing.T) {
	dir := tokDir(t, map[string]string{
		"tokenizer_config.json": `{"chat_template": "CONFIG", "eos_token": "<|im_end|>"}`,
		"chat_template.jinja":   "FILE{{ messages | length }}\n",
	})
	tok, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tok.Render("", Input{Messages: userMsg(t, "x")})
	if err != nil || got != "FILE1" {
		t.Errorf("render %q, %v; want the .jinja file without its trailing newline", got, err)
	}
	if !slices.Equal(tok.EOS, []int32{272}) || tok.AddBOS {
		t.Errorf("EOS %v AddBOS %v: want eos_token's id and no BOS", tok.EOS, tok.AddBOS)
	}
}

func TestLoadDirRefusals(t *testing.T) {
	cases := []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"broken template", map[string]string{"tokenizer_config.json": `{"chat_template": "{% if %}"}`}, "tokenizer_config.json: chat_template"},
		{"bad template list", map[string]string{"tokenizer_config.json": `{"chat_template": 3}`}, "chat_template must be a string or a list"},
		{"bad bos", map[string]string{"tokenizer_config.json": `{"add_bos_token": true, "bos_token": "<nope>"}`}, "bos_token \"<nope>\" is not a token"},
		{"bad eos id", map[string]string{"generation_config.json": `{"eos_token_id": 99999}`}, "eos_token_id 99999 is outside"},
		{"bad special", map[string]string{"tokenizer_config.json": `{"eos_token": 5}`}, "eos_token"},
		{"bad json", map[string]string{"tokenizer_config.json": `{`}, "tokenizer_config.json"},
	}
	for _, c := range cases {
		_, err := LoadDir(tokDir(t, c.files))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want it to mention %q", c.name, err, c.want)
		}
	}
	// No template: loading works, rendering is refused naming the fix.
	tok, err := LoadDir(tokDir(t, map[string]string{"tokenizer_config.json": `{"eos_token": "<|im_end|>"}`}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tok.Render("", Input{Messages: userMsg(t, "x")}); !errors.Is(err, ErrNoTemplate) || !strings.Contains(err.Error(), "chat_template.jinja") {
		t.Errorf("render without a template: %v", err)
	}
	if _, err := LoadDir(t.TempDir()); err == nil || !strings.Contains(err.Error(), "tokenizer.json") {
		t.Errorf("empty dir: %v", err)
	}
}

// TestRealRenderIDs: rendering a real template and encoding the text gives
// the markers' special-token ids, one id per marker occurrence, and the
// text decodes back exactly; the real directories' BOS and EOS come out as
// each model defines them.
func TestRealRenderIDs(t *testing.T) {
	msgs := json.RawMessage(`[{"role":"system","content":"Be brief."},{"role":"user","content":"2+2?"},{"role":"assistant","content":"4"},{"role":"user","content":"3+3?"}]`)
	cases := []struct {
		name    string
		markers []string
		addBOS  bool
		eos     string
	}{
		{realtok.Qwen3, []string{"<|im_start|>", "<|im_end|>"}, false, "<|im_end|>"},
		{realtok.Llama31, []string{"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}, true, "<|eot_id|>"},
		{realtok.DeepSeekV3, []string{"<｜begin▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>"}, true, "<｜end▁of▁sentence｜>"},
	}
	for _, c := range cases {
		tok := loadRealDir(t, c.name)
		ids, text, err := tok.RenderIDs("", Input{Messages: msgs, AddGenerationPrompt: true, Now: refNow})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for _, m := range c.markers {
			id, ok := tok.TokenID(m)
			if !ok {
				t.Fatalf("%s: no token %q", c.name, m)
			}
			n := 0
			for _, x := range ids {
				if x == id {
					n++
				}
			}
			if want := strings.Count(text, m); n != want || n == 0 {
				t.Errorf("%s: %q appears %d times in the text, its id %d %d times in the ids", c.name, m, want, id, n)
			}
		}
		if got := tok.Decode(ids); got != text {
			t.Errorf("%s: Decode(RenderIDs) = %q, want %q", c.name, got, text)
		}
		eos, _ := tok.TokenID(c.eos)
		if tok.AddBOS != c.addBOS || !slices.Equal(tok.EOS, []int32{eos}) {
			t.Errorf("%s: AddBOS %v EOS %v, want %v [%d]", c.name, tok.AddBOS, tok.EOS, c.addBOS, eos)
		}
	}
}
