package chattemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/asyncrl/asyncrl/model/hftokenizer"
)

// Tokenizer is a Hugging Face tokenizer directory: the tokenizer itself
// (tokenizer.json), its chat templates and special tokens
// (tokenizer_config.json, optionally chat_template.jinja and
// special_tokens_map.json) and the model's end-of-sequence ids
// (generation_config.json when present). It is immutable after LoadDir and
// safe for concurrent use.
type Tokenizer struct {
	*hftokenizer.Tokenizer
	// Dir is the directory it was loaded from.
	Dir string
	// Templates holds the chat templates by name: "default" for a single
	// template (tokenizer_config.json's chat_template string, or
	// chat_template.jinja), or the names of a [{name, template}] list.
	Templates map[string]*Template
	// Special is the special-tokens map the templates see (bos_token,
	// eos_token, unk_token, sep_token, pad_token, cls_token, mask_token as
	// strings; additional_special_tokens as a list), as transformers'
	// special_tokens_map.
	Special map[string]any
	// AddBOS: encoding a raw text prompt with add_special_tokens=True (what
	// vLLM does for a /v1/completions text prompt) puts BOSPrefix in front.
	AddBOS    bool
	BOSPrefix []int32
	// EOS holds the ids that end generation: generation_config.json's
	// eos_token_id (an id or a list) when the file is there, else the id of
	// eos_token. Empty when neither is known.
	EOS []int32
}

// configJSON is the part of tokenizer_config.json read here.
type configJSON struct {
	ChatTemplate json.RawMessage `json:"chat_template"`
	AddBOSToken  *bool           `json:"add_bos_token"`
}

// specialKeys are transformers' SPECIAL_TOKENS_ATTRIBUTES.
var specialKeys = []string{"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token", "additional_special_tokens"}

// LoadDir loads a tokenizer directory. tokenizer.json is required;
// tokenizer_config.json is read when present (a directory without it has
// no chat template and no special tokens beyond generation_config.json's
// ids). The chat template comes from chat_template.jinja when that file
// exists (newer transformers saves it there, and prefers it), else from
// tokenizer_config.json's chat_template (a string, or a list of
// {"name", "template"}). special_tokens_map.json, when present, overrides
// tokenizer_config.json's special tokens, as transformers' from_pretrained
// does.
func LoadDir(dir string) (*Tokenizer, error) {
	tok, err := hftokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, err
	}
	t := &Tokenizer{Tokenizer: tok, Dir: dir, Templates: map[string]*Template{}, Special: map[string]any{}}
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	var cfg configJSON
	switch b, err := os.ReadFile(cfgPath); {
	case err == nil:
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(b, &raw); err != nil {
			return nil, fmt.Errorf("chattemplate: %s: %w", cfgPath, err)
		}
		if err := json.Unmarshal(b, &cfg); err != nil {
			return nil, fmt.Errorf("chattemplate: %s: %w", cfgPath, err)
		}
		if err := t.readSpecial(raw, cfgPath); err != nil {
			return nil, err
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("chattemplate: %w", err)
	}
	mapPath := filepath.Join(dir, "special_tokens_map.json")
	var smap map[string]json.RawMessage
	if err := readJSON(mapPath, &smap); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if err := t.readSpecial(smap, mapPath); err != nil {
		return nil, err
	}
	if err := t.readTemplates(dir, cfg.ChatTemplate, cfgPath); err != nil {
		return nil, err
	}
	if err := t.readBOS(cfg.AddBOSToken); err != nil {
		return nil, fmt.Errorf("chattemplate: %s: %w", cfgPath, err)
	}
	if err := t.readEOS(dir); err != nil {
		return nil, err
	}
	return t, nil
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("chattemplate: %s: %w", path, err)
	}
	return nil
}

// tokenContent reads a special token as tokenizer_config.json spells it: a
// string, an AddedToken object ({"content": …}, with or without
// "__type": "AddedToken"), or null.
func tokenContent(raw json.RawMessage) (string, bool, error) {
	if isNull(raw) {
		return "", false, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, true, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == nil {
		return "", false, fmt.Errorf("want a string or an AddedToken object with content")
	}
	return *obj.Content, true, nil
}

func isNull(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null"
}

// readSpecial takes the special tokens a config file sets (a later file
// overrides an earlier one).
func (t *Tokenizer) readSpecial(raw map[string]json.RawMessage, path string) error {
	for _, k := range specialKeys {
		v, ok := raw[k]
		if !ok {
			continue
		}
		if k == "additional_special_tokens" {
			var items []json.RawMessage
			if isNull(v) {
				continue
			}
			if err := json.Unmarshal(v, &items); err != nil {
				return fmt.Errorf("chattemplate: %s: %s: %w", path, k, err)
			}
			list := make([]any, 0, len(items))
			for i, it := range items {
				s, ok, err := tokenContent(it)
				if err != nil {
					return fmt.Errorf("chattemplate: %s: %s[%d]: %w", path, k, i, err)
				}
				if ok {
					list = append(list, s)
				}
			}
			t.Special[k] = list
			continue
		}
		s, ok, err := tokenContent(v)
		if err != nil {
			return fmt.Errorf("chattemplate: %s: %s: %w", path, k, err)
		}
		if ok {
			t.Special[k] = s
		} else {
			delete(t.Special, k)
		}
	}
	return nil
}

func (t *Tokenizer) readTemplates(dir string, raw json.RawMessage, cfgPath string) error {
	jinjaPath := filepath.Join(dir, "chat_template.jinja")
	if b, err := os.ReadFile(jinjaPath); err == nil {
		tmpl, err := Compile("default", string(b))
		if err != nil {
			return fmt.Errorf("chattemplate: %s: %w", jinjaPath, err)
		}
		t.Templates["default"] = tmpl
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("chattemplate: %w", err)
	}
	if isNull(raw) {
		return nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		tmpl, err := Compile("default", one)
		if err != nil {
			return fmt.Errorf("chattemplate: %s: chat_template: %w", cfgPath, err)
		}
		t.Templates["default"] = tmpl
		return nil
	}
	var list []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return fmt.Errorf("chattemplate: %s: chat_template must be a string or a list of {name, template}: %w", cfgPath, err)
	}
	for i, e := range list {
		if e.Name == "" {
			return fmt.Errorf("chattemplate: %s: chat_template[%d] has no name", cfgPath, i)
		}
		tmpl, err := Compile(e.Name, e.Template)
		if err != nil {
			return fmt.Errorf("chattemplate: %s: chat_template[%d]: %w", cfgPath, i, err)
		}
		t.Templates[e.Name] = tmpl
	}
	return nil
}

// readBOS decides whether a raw text prompt gets a BOS: add_bos_token when
// tokenizer_config.json sets it (DeepSeek-V3: true, with bos_token; Qwen3:
// false), else the tokenizer.json post-processor's prefix (Llama-3's
// TemplateProcessing puts <|begin_of_text|> first).
func (t *Tokenizer) readBOS(addBOS *bool) error {
	if addBOS == nil {
		t.BOSPrefix = t.SpecialPrefix()
		t.AddBOS = len(t.BOSPrefix) > 0
		return nil
	}
	if !*addBOS {
		return nil
	}
	bos, _ := t.Special["bos_token"].(string)
	id, ok := t.TokenID(bos)
	if bos == "" || !ok {
		return fmt.Errorf("add_bos_token is true but bos_token %q is not a token of tokenizer.json", bos)
	}
	t.AddBOS, t.BOSPrefix = true, []int32{id}
	return nil
}

// readEOS takes generation_config.json's eos_token_id (an int or a list),
// else eos_token's id.
func (t *Tokenizer) readEOS(dir string) error {
	path := filepath.Join(dir, "generation_config.json")
	var gc struct {
		EOS json.RawMessage `json:"eos_token_id"`
	}
	err := readJSON(path, &gc)
	switch {
	case err == nil && !isNull(gc.EOS):
		var one int32
		if json.Unmarshal(gc.EOS, &one) == nil {
			t.EOS = []int32{one}
		} else if err := json.Unmarshal(gc.EOS, &t.EOS); err != nil {
			return fmt.Errorf("chattemplate: %s: eos_token_id must be an id or a list of ids", path)
		}
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return err
	default:
		if eos, ok := t.Special["eos_token"].(string); ok {
			if id, ok := t.TokenID(eos); ok {
				t.EOS = []int32{id}
			}
		}
	}
	for _, id := range t.EOS {
		if id < 0 || int(id) >= t.VocabSize() {
			return fmt.Errorf("chattemplate: %s: eos_token_id %d is outside the tokenizer's %d ids", path, id, t.VocabSize())
		}
	}
	return nil
}

// TemplateNames lists the chat templates, sorted.
func (t *Tokenizer) TemplateNames() []string {
	names := make([]string, 0, len(t.Templates))
	for n := range t.Templates {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// HasTemplate reports whether the directory has a chat template.
func (t *Tokenizer) HasTemplate() bool { return len(t.Templates) > 0 }

// IsEOS reports whether id is one of the EOS ids.
func (t *Tokenizer) IsEOS(id int32) bool {
	for _, e := range t.EOS {
		if e == id {
			return true
		}
	}
	return false
}
