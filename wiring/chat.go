package wiring

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/asyncrl/asyncrl/actors/rollout"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/model/chattemplate"
	"github.com/asyncrl/asyncrl/model/hftokenizer"
)

// TokenizerDir is the run's Hugging Face tokenizer directory:
// engines.external[0].tokenizer when it names a directory, else the
// directory of the tokenizer.json it names ("" = the built-in vocabulary).
func TokenizerDir(c config.EnginesConfig) string {
	if len(c.External) == 0 || c.External[0].Tokenizer == "" {
		return ""
	}
	p := c.External[0].Tokenizer
	if st, err := os.Stat(p); err == nil && st.IsDir() {
		return p
	}
	return filepath.Dir(p)
}

// loadTokenizer reads engines.external[0].tokenizer: a directory (LoadDir)
// or a tokenizer.json file.
func loadTokenizer(path string) (*hftokenizer.Tokenizer, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		t, err := chattemplate.LoadDir(path)
		if err != nil {
			return nil, err
		}
		return t.Tokenizer, nil
	}
	return hftokenizer.Load(path)
}

// ChatFormat is the rollouts' chat format under rollout.chat_template: one
// chattemplate.Conversation per episode, rendered with the chat template of
// the tokenizer directory dir, the rollout section's system prompt and
// template variables. It is nil (plain text episodes) when chat_template is
// off. It checks once that the directory can drive chat episodes (a chat
// template with a generation prompt), so a bad tokenizer fails the start,
// not every episode.
func ChatFormat(ro config.RolloutConfig, dir string) (rollout.ChatFormat, error) {
	if !ro.ChatTemplate {
		return nil, nil
	}
	if dir == "" {
		return nil, fmt.Errorf("rollout.chat_template: no tokenizer directory: set model.tokenizer (a run on a Hugging Face model) or engines.external[].tokenizer to the model's Hugging Face tokenizer directory")
	}
	tok, err := chattemplate.LoadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("rollout.chat_template: %w", err)
	}
	kw, err := ro.TemplateKwargs()
	if err != nil {
		return nil, fmt.Errorf("rollout.chat_template_kwargs: %w", err)
	}
	opts := chattemplate.ConversationOptions{System: ro.SystemPrompt, Vars: map[string]any{}}
	for k, v := range kw {
		opts.Vars[k] = v
	}
	if err := tok.CheckChat(opts); err != nil {
		return nil, fmt.Errorf("rollout.chat_template: %w", err)
	}
	return chatFormat{tok: tok, opts: opts}, nil
}

type chatFormat struct {
	tok  *chattemplate.Tokenizer
	opts chattemplate.ConversationOptions
}

// NewChat starts one episode's conversation (its strftime_now clock fixed
// at the start, so a date in the template cannot change between turns).
func (f chatFormat) NewChat() (rollout.Chat, error) {
	c, err := f.tok.NewConversation(f.opts)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// TokenizerIn returns dir when it holds a Hugging Face tokenizer
// (tokenizer.json), as an HF checkpoint directory with its tokenizer files
// copied alongside does; else "".
func TokenizerIn(dir string) string {
	if dir == "" {
		return ""
	}
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		return ""
	}
	return dir
}

// EngineTokenizer is the engine option serving text with the tokenizer
// directory dir (engine.WithTokenizer), checked against the served model: a
// tokenizer with ids the model has no embedding for is refused at start,
// naming both. No options for dir "".
func EngineTokenizer(dir string, m engine.Model) ([]engine.Option, error) {
	if dir == "" {
		return nil, nil
	}
	tok, err := chattemplate.LoadDir(dir)
	if err != nil {
		return nil, err
	}
	if m != nil && tok.VocabSize() > m.VocabSize() {
		return nil, fmt.Errorf("tokenizer %s has %d ids but the model's embedding has %d rows: the tokenizer does not belong to this model", filepath.Join(dir, "tokenizer.json"), tok.VocabSize(), m.VocabSize())
	}
	return []engine.Option{engine.WithTokenizer(tok)}, nil
}
