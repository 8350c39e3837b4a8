package chattemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/ardanlabs/jinja"
)

// Sentinel errors.
var (
	// ErrTemplate wraps a template that does not compile or fails to
	// render (including a template's own raise_exception).
	ErrTemplate = errors.New("chattemplate: template error")
	// ErrNoTemplate: the tokenizer directory has no chat template.
	ErrNoTemplate = errors.New("chattemplate: no chat template")
	// ErrInput wraps malformed messages, tools or variables.
	ErrInput = errors.New("chattemplate: bad input")
)

// Template is a compiled chat template. It is immutable and safe for
// concurrent use.
type Template struct {
	// Name is the template's name ("default", "tool_use", …).
	Name   string
	source string
	t      *jinja.Template
}

// newlines matches every line break jinja2's lexer normalises.
var newlines = regexp.MustCompile(`\r\n|\r|\n`)

// Compile compiles a chat template the way transformers' environment reads
// it: line breaks become "\n" and one trailing line break is dropped
// (jinja2's Lexer with newline_sequence "\n" and keep_trailing_newline
// False, the defaults of the ImmutableSandboxedEnvironment transformers
// builds); trim_blocks and lstrip_blocks are on (ardanlabs/jinja applies
// them always, as transformers configures them).
func Compile(name, source string) (*Template, error) {
	src := newlines.ReplaceAllString(source, "\n")
	if len(src) > 0 && src[len(src)-1] == '\n' {
		src = src[:len(src)-1]
	}
	t, err := jinja.Compile(src)
	if err != nil {
		return nil, fmt.Errorf("%w: compile %s: %w", ErrTemplate, name, err)
	}
	return &Template{Name: name, source: source, t: t}, nil
}

// Source is the template text as given.
func (t *Template) Source() string { return t.source }

// Input is what one render sees. Messages, Tools and Documents are JSON
// (an array each; Tools and Documents may be empty, which the template
// sees as None, as transformers passes tools=None); they are decoded
// keeping object key order. Vars are extra template variables (e.g.
// enable_thinking); they override the tokenizer's special tokens, as
// apply_chat_template's kwargs do.
type Input struct {
	Messages            json.RawMessage
	Tools               json.RawMessage
	Documents           json.RawMessage
	AddGenerationPrompt bool
	Vars                map[string]any
	// Now is the clock strftime_now reads (transformers reads
	// datetime.now()); the zero time means the wall clock at render time.
	Now time.Time
}

// Render renders the template for in.
func (t *Template) Render(in Input) (string, error) {
	data, err := in.values()
	if err != nil {
		return "", err
	}
	out, err := t.t.RenderValues(data)
	if err != nil {
		return "", fmt.Errorf("%w: render %s: %w", ErrTemplate, t.Name, err)
	}
	return out, nil
}

// values builds the render scope: messages, tools, documents,
// add_generation_prompt, then Vars, then strftime_now (transformers'
// globals raise_exception and strftime_now; ardanlabs/jinja has
// raise_exception built in).
func (in Input) values() (map[string]jinja.Value, error) {
	msgs, err := jsonValue(in.Messages)
	if err != nil {
		return nil, fmt.Errorf("%w: messages: %w", ErrInput, err)
	}
	if !msgs.IsList() {
		return nil, fmt.Errorf("%w: messages must be a JSON array", ErrInput)
	}
	tools, err := jsonValue(in.Tools)
	if err != nil {
		return nil, fmt.Errorf("%w: tools: %w", ErrInput, err)
	}
	if !tools.IsNone() && !tools.IsList() {
		return nil, fmt.Errorf("%w: tools must be a JSON array", ErrInput)
	}
	docs, err := jsonValue(in.Documents)
	if err != nil {
		return nil, fmt.Errorf("%w: documents: %w", ErrInput, err)
	}
	data := map[string]jinja.Value{
		"messages":              msgs,
		"tools":                 tools,
		"documents":             docs,
		"add_generation_prompt": jinja.NewBool(in.AddGenerationPrompt),
	}
	for k, v := range in.Vars {
		val, err := goValue(v)
		if err != nil {
			return nil, fmt.Errorf("%w: variable %s: %w", ErrInput, k, err)
		}
		data[k] = val
	}
	now := in.Now
	data["strftime_now"] = jinja.NewCallable("strftime_now", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		if len(args) != 1 || !args[0].IsString() {
			return jinja.Undefined(), fmt.Errorf("strftime_now takes one format string")
		}
		t := now
		if t.IsZero() {
			t = time.Now()
		}
		return jinja.NewString(strftime(t, args[0].AsString())), nil
	})
	return data, nil
}
