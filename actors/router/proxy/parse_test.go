package proxy

import (
	"strings"
	"testing"
)

func TestParseEngineMetrics(t *testing.T) {
	cases := []struct {
		name  string
		text  string
		queue int
		kv    float64
		ok    bool
	}{
		{"vllm labels summed and maxed", "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 3\nvllm:num_requests_waiting{engine=\"1\",model_name=\"m\"} 4\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.25\nvllm:kv_cache_usage_perc{engine=\"1\"} 0.75\n", 7, 0.75, true},
		{"no labels", "vllm:num_requests_waiting 2\nvllm:kv_cache_usage_perc 0.1\n", 2, 0.1, true},
		{"other metrics only", "vllm:num_requests_running 9\n", 0, 0, false},
		{"garbage value", "vllm:num_requests_waiting{a=\"b\"} NaNx\n", 0, 0, false},
		{"label with brace and space", "vllm:kv_cache_usage_perc{x=\"a b}\"} 0.5 1700000000\n", 0, 0.5, true},
	}
	for _, tc := range cases {
		q, kv, ok := parseEngineMetrics(strings.NewReader(tc.text))
		if q != tc.queue || kv != tc.kv || ok != tc.ok {
			t.Errorf("%s: got %d %v %v", tc.name, q, kv, ok)
		}
	}
}

func TestParseBody(t *testing.T) {
	cases := []struct {
		name         string
		body         string
		prompt, dec  int
		prefixNonZer bool
	}{
		{"token ids", `{"prompt":[1,2,3,4,5],"max_tokens":10}`, 5, 10, true},
		{"text prompt", `{"prompt":"` + strings.Repeat("a", 398) + `","max_tokens":7,"n":4}`, 100, 28, true},
		{"chat", `{"messages":[{"role":"user","content":"hello"}],"max_completion_tokens":3}`, 8, 3, true},
		{"default decode", `{"prompt":"abcd"}`, 1, 256, true},
		{"malformed", `{"prompt":`, 2, 256, false},
	}
	for _, tc := range cases {
		got := parseBody([]byte(tc.body), 256, 2048)
		if got.promptTokens != tc.prompt || got.decodeTokens != tc.dec || (got.prefixHash != 0) != tc.prefixNonZer {
			t.Errorf("%s: %+v", tc.name, got)
		}
	}
	// Group samples share a long prompt prefix → same prefix hash even when
	// later turns differ.
	p := strings.Repeat("shared system prompt ", 200)
	a := parseBody([]byte(`{"prompt":"`+p+` turn A"}`), 0, 2048)
	b := parseBody([]byte(`{"prompt":"`+p+` turn B, longer"}`), 0, 2048)
	if a.prefixHash != b.prefixHash {
		t.Fatal("shared prefix hashed differently")
	}
}
