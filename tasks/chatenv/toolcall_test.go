package chatenv

import (
	"strings"
	"testing"
)

// TestParseToolCalls pins both formats on what the templates render and
// on what a model gets wrong: every malformed call is a CallError with a
// reason, the well-formed calls beside it still come out, and nothing
// panics.
func TestParseToolCalls(t *testing.T) {
	cases := []struct {
		name    string
		format  ToolFormat
		text    string
		content string
		calls   []string // name + " " + arguments
		errs    []string // substrings of the reasons
	}{
		{"hermes as Qwen3 renders it", ToolsHermes,
			"<think>\nadd\n</think>\n\n<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expr\": \"2+3\"}}\n</tool_call>",
			"<think>\nadd\n</think>", []string{`calc {"expr": "2+3"}`}, nil},
		{"hermes two calls and text", ToolsHermes,
			"Let me see.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": [1, 2]}}\n</tool_call>",
			"Let me see.", []string{"a {}", `b {"x": [1, 2]}`}, nil},
		{"hermes no call", ToolsHermes, "The answer is 5.", "The answer is 5.", nil, nil},
		{"hermes unclosed", ToolsHermes, "x <tool_call>{\"name\": \"a\"", "x", nil, []string{"without </tool_call>"}},
		{"hermes bad json beside a good call", ToolsHermes,
			"<tool_call>{name: a}</tool_call><tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>",
			"", []string{"b {}"}, []string{"not a JSON object"}},
		{"hermes no name", ToolsHermes, "<tool_call>{\"arguments\": {}}</tool_call>", "", nil, []string{`no "name"`}},
		{"hermes arguments not an object", ToolsHermes, "<tool_call>{\"name\": \"a\", \"arguments\": 3}</tool_call>", "", nil, []string{"must be a JSON object"}},
		{"hermes trailing junk", ToolsHermes, "<tool_call>{\"name\": \"a\"} }</tool_call>", "", nil, []string{"text after"}},
		{"llama3 as the template renders it", ToolsLlama3,
			"{\"name\": \"calc\", \"parameters\": {\"expr\": \"7*6\"}}", "", []string{`calc {"expr": "7*6"}`}, nil},
		{"llama3 python_tag and two calls", ToolsLlama3,
			"<|python_tag|>{\"name\": \"a\", \"parameters\": {\"s\": \"x;y\"}}; {\"name\": \"b\", \"arguments\": {}}", "",
			[]string{`a {"s": "x;y"}`, "b {}"}, nil},
		{"llama3 plain answer", ToolsLlama3, "It is 42.", "It is 42.", nil, nil},
		{"llama3 broken", ToolsLlama3, "{\"name\": \"calc\", \"parameters\": {\"expr\": ", "", nil, []string{"not a JSON object"}},
		{"none", ToolsNone, "<tool_call>{\"name\": \"a\"}</tool_call>", "<tool_call>{\"name\": \"a\"}</tool_call>", nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			msg, errs := ParseToolCalls(c.format, c.text)
			if msg.Role != "assistant" || msg.Content != c.content {
				t.Errorf("message %q %q, want assistant %q", msg.Role, msg.Content, c.content)
			}
			var got []string
			for i, tc := range msg.ToolCalls {
				got = append(got, tc.Function.Name+" "+string(tc.Function.Arguments))
				if tc.Type != "function" || tc.ID == "" {
					t.Errorf("call %d: type %q id %q", i, tc.Type, tc.ID)
				}
			}
			if strings.Join(got, "|") != strings.Join(c.calls, "|") {
				t.Errorf("calls %q, want %q", got, c.calls)
			}
			if len(errs) != len(c.errs) {
				t.Fatalf("errors %v, want %d", errs, len(c.errs))
			}
			for i, e := range errs {
				if !strings.Contains(e.Reason, c.errs[i]) {
					t.Errorf("error %d %q, want it to say %q", i, e.Reason, c.errs[i])
				}
			}
		})
	}
}
