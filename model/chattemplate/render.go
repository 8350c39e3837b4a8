package chattemplate

import (
	"fmt"
	"strings"
)

// Select picks the chat template as transformers' get_chat_template does:
// the one named when name is given; else "tool_use" when the render has
// tools and the directory has such a template; else "default" (a single
// template is "default").
func (t *Tokenizer) Select(name string, hasTools bool) (*Template, error) {
	if len(t.Templates) == 0 {
		return nil, fmt.Errorf("%w: %s has neither chat_template.jinja nor a chat_template in tokenizer_config.json: use a tokenizer directory of an instruction-tuned model (or add its template)", ErrNoTemplate, t.Dir)
	}
	if name != "" {
		tmpl, ok := t.Templates[name]
		if !ok {
			return nil, fmt.Errorf("%w: %s has no chat template named %q (it has %s)", ErrNoTemplate, t.Dir, name, strings.Join(t.TemplateNames(), ", "))
		}
		return tmpl, nil
	}
	if tmpl, ok := t.Templates["tool_use"]; ok && hasTools {
		return tmpl, nil
	}
	if tmpl, ok := t.Templates["default"]; ok {
		return tmpl, nil
	}
	return nil, fmt.Errorf("%w: %s has several chat templates (%s) and none is \"default\": name one", ErrNoTemplate, t.Dir, strings.Join(t.TemplateNames(), ", "))
}

// Render renders in with the template Select(name, …) picks. The template
// sees the special tokens (Special) under in.Vars, as apply_chat_template's
// template_kwargs = {**special_tokens_map, **kwargs} gives them.
func (t *Tokenizer) Render(name string, in Input) (string, error) {
	tmpl, err := t.Select(name, !isNull(in.Tools))
	if err != nil {
		return "", err
	}
	vars := make(map[string]any, len(t.Special)+len(in.Vars))
	for k, v := range t.Special {
		vars[k] = v
	}
	for k, v := range in.Vars {
		vars[k] = v
	}
	in.Vars = vars
	return tmpl.Render(in)
}

// RenderIDs is Render followed by Encode: the special tokens the template
// spells out (e.g. "<|im_start|>") become their ids, and nothing else is
// added (apply_chat_template tokenizes with add_special_tokens=False).
func (t *Tokenizer) RenderIDs(name string, in Input) ([]int32, string, error) {
	text, err := t.Render(name, in)
	if err != nil {
		return nil, "", err
	}
	return t.Encode(text), text, nil
}
