package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/asyncrl/asyncrl/model/chattemplate"
)

// newTokenizerCmd: asyncrl tokenizer render — a Hugging Face tokenizer
// directory's chat template, rendered and encoded (docs/chat.md).
func newTokenizerCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tokenizer",
		Short: "Render chat templates of Hugging Face tokenizer directories",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newTokenizerRenderCmd(g))
	return cmd
}

// chatFile is what --messages accepts: a JSON array of messages, or an
// object with "messages" (and optionally "tools"), like a chat JSONL row
// or an OpenAI chat request.
type chatFile struct {
	Messages json.RawMessage `json:"messages"`
	Tools    json.RawMessage `json:"tools"`
}

func readChatFile(path string, stdin io.Reader) (chatFile, error) {
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(stdin)
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return chatFile{}, err
	}
	trimmed := strings.TrimSpace(string(b))
	if strings.HasPrefix(trimmed, "[") {
		return chatFile{Messages: json.RawMessage(trimmed)}, nil
	}
	var f chatFile
	if err := json.Unmarshal(b, &f); err != nil {
		return chatFile{}, fmt.Errorf("want a JSON array of messages or an object with \"messages\": %w", err)
	}
	if len(f.Messages) == 0 {
		return chatFile{}, fmt.Errorf("the object has no \"messages\"")
	}
	return f, nil
}

func newTokenizerRenderCmd(g *globals) *cobra.Command {
	var (
		dir, messages, tools, template, now string
		vars                                []string
		genPrompt, asJSON                   bool
	)
	cmd := &cobra.Command{
		Use:   "render --tokenizer DIR --messages FILE",
		Short: "Render messages with the tokenizer's chat template and print the text and its token ids",
		Long: "Renders a conversation with the chat template of a Hugging Face tokenizer directory\n" +
			"(tokenizer.json + tokenizer_config.json, optionally chat_template.jinja) exactly as\n" +
			"transformers' apply_chat_template does, then encodes the text with the tokenizer:\n" +
			"special tokens the template spells become their ids, nothing else is added.\n" +
			"--messages is a JSON array of messages or an object with \"messages\" (and \"tools\");\n" +
			"\"-\" reads stdin. --var name=JSON sets a template variable (enable_thinking=false).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" || messages == "" {
				return fail("asyncrl tokenizer render: --tokenizer DIR and --messages FILE are required")
			}
			tok, err := chattemplate.LoadDir(dir)
			if err != nil {
				return fail("asyncrl tokenizer render: %v", err)
			}
			chat, err := readChatFile(messages, cmd.InOrStdin())
			if err != nil {
				return fail("asyncrl tokenizer render: --messages %s: %v", messages, err)
			}
			in := chattemplate.Input{Messages: chat.Messages, Tools: chat.Tools, AddGenerationPrompt: genPrompt, Vars: map[string]any{}}
			if tools != "" {
				b, err := os.ReadFile(tools)
				if err != nil {
					return fail("asyncrl tokenizer render: --tools: %v", err)
				}
				in.Tools = b
			}
			for _, kv := range vars {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" || !json.Valid([]byte(v)) {
					return fail("asyncrl tokenizer render: --var %q: want name=JSON (e.g. enable_thinking=false, date_string=\"26 Jul 2024\")", kv)
				}
				in.Vars[k] = json.RawMessage(v)
			}
			if now != "" {
				if in.Now, err = time.Parse(time.RFC3339, now); err != nil {
					return fail("asyncrl tokenizer render: --now: %v (want RFC 3339, e.g. 2025-01-02T03:04:05Z)", err)
				}
			}
			ids, text, err := tok.RenderIDs(template, in)
			if err != nil {
				return fail("asyncrl tokenizer render: %v", err)
			}
			if asJSON {
				toks := make([]string, len(ids))
				for i, id := range ids {
					toks[i], _ = tok.Token(id)
				}
				return writeJSON(g.stdout, struct {
					Text   string   `json:"text"`
					IDs    []int32  `json:"ids"`
					Tokens []string `json:"tokens"`
				}{text, ids, toks})
			}
			fmt.Fprint(g.stdout, text)
			if !strings.HasSuffix(text, "\n") {
				fmt.Fprintln(g.stdout)
			}
			strs := make([]string, len(ids))
			for i, id := range ids {
				strs[i] = fmt.Sprint(id)
			}
			fmt.Fprintf(g.stdout, "--- %d tokens\n%s\n", len(ids), strings.Join(strs, " "))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "tokenizer", "", "Hugging Face tokenizer `DIR` (tokenizer.json, tokenizer_config.json, optionally chat_template.jinja)")
	f.StringVar(&messages, "messages", "", "`FILE` with a JSON array of messages, or an object with \"messages\" and \"tools\" (- = stdin)")
	f.StringVar(&tools, "tools", "", "`FILE` with a JSON array of tool definitions (overrides the messages file's \"tools\")")
	f.BoolVar(&genPrompt, "generation-prompt", false, "append the generation prompt (add_generation_prompt=True)")
	f.StringVar(&template, "template", "", "template `NAME` when the directory has several (default: tool_use with tools, else default)")
	f.StringArrayVar(&vars, "var", nil, "template variable `name=JSON` (repeatable), e.g. enable_thinking=false")
	f.StringVar(&now, "now", "", "clock for strftime_now, RFC 3339 (default: now)")
	f.BoolVar(&asJSON, "json", false, "print {text, ids, tokens} as JSON")
	return cmd
}
