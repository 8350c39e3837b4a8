// Package chattemplate loads a Hugging Face tokenizer directory and renders
// its chat template the way transformers' apply_chat_template does, so a
// chat-format prompt built in Go is the prompt the model was trained on.
//
// # Contract
//
//   - LoadDir reads tokenizer.json (required, model/hftokenizer),
//     tokenizer_config.json (chat_template as a string or a list of named
//     templates; bos_token/eos_token/… as strings or AddedToken objects;
//     add_bos_token), chat_template.jinja (preferred over the config's
//     template, as newer transformers saves it), special_tokens_map.json
//     (overrides the config's special tokens) and generation_config.json
//     (eos_token_id: one id or a list). A directory may hold just
//     tokenizer.json and tokenizer_config.json. Every malformed file is an
//     error naming the file and field; a directory without a template loads,
//     and rendering with it fails with ErrNoTemplate naming the fix.
//   - Render/RenderIDs: messages (role, content, tool_calls in the OpenAI
//     shape with arguments an object or a JSON string, tool results with
//     role "tool" and tool_call_id/name, reasoning_content), tools,
//     add_generation_prompt and extra variables (enable_thinking, …) in;
//     text out, and its ids: Encode of the text, in which every special
//     token the template spells becomes its id and nothing is added
//     (apply_chat_template tokenizes with add_special_tokens=False).
//     JSON object key order is kept (Python dicts are ordered), so tojson
//     of a tool schema prints keys as the caller wrote them.
//   - The environment is transformers' (_compile_jinja_template in
//     src/transformers/utils/chat_template_utils.py,
//     huggingface/transformers@5e43e2e892453b405ce6d2cb94387b3a3213f30a):
//     trim_blocks and lstrip_blocks, loop controls, a tojson without HTML
//     escaping and with ensure_ascii off, raise_exception, strftime_now
//     (reading Input.Now), the special-tokens map under the caller's
//     variables (template_kwargs = {**special_tokens_map, **kwargs}), and
//     tools=None/documents=None when absent. As jinja2's lexer does, "\r\n"
//     and "\r" in the source become "\n" and one trailing newline is
//     dropped (keep_trailing_newline=False).
//   - Conversation (conversation.go) builds a multi-turn chat episode token
//     by token without ever re-tokenising the history (see its doc).
//
// # The Jinja library
//
// github.com/ardanlabs/jinja v1.8.0 (zero dependencies; later versions
// need Go 1.27). Compared with github.com/nikolalohinski/gonja/v2 v2.9.1
// on the three real templates (Qwen3, Llama-3.1, DeepSeek-V3) and the
// conversations of testdata/cases.json against Python's jinja2: ardanlabs
// rendered every valid conversation byte-identically except the None
// printing below; gonja sorted the keys of tojson output, escaped &, < and
// > in it, and refused `trim` on None, so Qwen3's tool prompts differed.
// TestRealTemplatesMatchJinja2 and TestEnvironmentFeatures run the
// comparison in `make test` (integrations/chatref/render.py is the jinja2
// side).
//
// # Known differences from jinja2 (ardanlabs/jinja v1.8.0)
//
//   - None prints as "" (jinja2: "None"), also through `| string` and
//     `| trim`: the pinned Llama-3.1 template renders a tool-call message
//     whose content is null with an empty body, jinja2 with "None".
//   - Where jinja2 raises on bad input it may render: `'x' in None`
//     (Qwen3 with a null content), `messages[0].role` on an empty list.
//   - A float with no fraction prints without ".0" (`{{ 1.0 }}` → "1",
//     `1.0 | tojson` → "1"); jinja2 prints "1.0". A tool-call argument
//     1.0 given as JSON therefore renders as 1 in Qwen3's tool calls.
//   - tojson(indent=N) sorts keys and escapes HTML characters (the
//     official Llama-3.1 tool template uses indent=4 for tools: its tool
//     prompts differ), and tojson ignores sort_keys.
//   - `dict | list` gives [dict] (jinja2: the keys); number literals with
//     an exponent (1e20) do not parse.
//   - The sandbox is not immutable: list.append and dict.update work where
//     transformers' ImmutableSandboxedEnvironment refuses them.
//
// None of these affects the three pinned templates on well-formed
// conversations (string contents, integer or fractional arguments).
package chattemplate
