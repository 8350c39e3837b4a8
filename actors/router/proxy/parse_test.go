package proxy

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/actors/router/policy"
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
		// SGLang (python/sglang/srt/metrics/collector.py, --enable-metrics):
		// the load signal bounded_sticky had none of before issue 30.
		{"sglang", "# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{model_name=\"m\",dp_rank=\"0\"} 5\nsglang:num_queue_reqs{model_name=\"m\",dp_rank=\"1\"} 2\n# TYPE sglang:token_usage gauge\nsglang:token_usage{dp_rank=\"0\"} 0.4\nsglang:token_usage{dp_rank=\"1\"} 0.9\n", 7, 0.9, true},
		{"sglang other metrics only", "sglang:gen_throughput 812.5\n", 0, 0, false},
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
		// SGLang's native /generate (rollouts on SGLang engines).
		{"sglang generate", `{"input_ids":[1,2,3,4,5,6],"sampling_params":{"max_new_tokens":9},"return_logprob":true}`, 6, 9, true},
		{"sglang default decode", `{"input_ids":[1,2],"sampling_params":{"temperature":1}}`, 2, 256, true},
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
	// The block hashes tell the two apart beyond the shared part: equal
	// for the blocks inside the shared prompt, and there are as many as
	// whole 2 KiB blocks.
	if len(a.prefixBlocks) != (len(p)+len(` turn A`)+2)/2048 || a.prefixBlocks[0] != b.prefixBlocks[0] {
		t.Fatalf("blocks: %d, want %d; first equal %v", len(a.prefixBlocks), (len(p)+len(` turn A`)+2)/2048, a.prefixBlocks[0] == b.prefixBlocks[0])
	}
	long := strings.Repeat("x", 4096)
	c := parseBody([]byte(`{"prompt":"`+p+long+`A"}`), 0, 2048)
	d := parseBody([]byte(`{"prompt":"`+p+long+`B"}`), 0, 2048)
	if c.prefixBlocks[1] != d.prefixBlocks[1] {
		t.Fatal("equal leading blocks hashed differently")
	}
	e := parseBody([]byte(`{"prompt":"`+p[:2100]+"conversation E"+long+`"}`), 0, 2048)
	if e.prefixBlocks[0] != c.prefixBlocks[0] || e.prefixBlocks[1] == c.prefixBlocks[1] {
		t.Fatal("blocks should agree on the shared first block and differ after")
	}
}

func TestCountTokenIDs(t *testing.T) {
	cases := []struct {
		raw  string
		n    int
		isID bool
	}{
		{`[1,2,3]`, 3, true},
		{` [ 10 , 200,3 ] `, 3, true},
		{`[]`, 0, true},
		{`[-1, 7]`, 2, true},
		{`[1.5, 2]`, 0, false},
		{`["a", 2]`, 0, false},
		{`[[1],[2]]`, 0, false},
		{`"1,2,3"`, 0, false},
		{`[`, 0, false},
	}
	for _, tc := range cases {
		n, ok := countTokenIDs([]byte(tc.raw))
		if n != tc.n || ok != tc.isID {
			t.Errorf("%s: got %d %v, want %d %v", tc.raw, n, ok, tc.n, tc.isID)
		}
	}
}

// parseRequest decodes the body once; it must agree with the two-pass
// reference (policy.SessionKey, then parseBody) on every body.
func TestParseRequestMatchesTwoPass(t *testing.T) {
	bodies := []string{
		`{"prompt":[1,2,3,4,5],"max_tokens":10,"session_id":"s1"}`,
		`{"prompt":"hello","user":"u1","session_id":"s2"}`,
		`{"messages":[{"role":"user","content":"hi"}],"session_params":{"session_id":42}}`,
		`{"prompt":"x","session_params":{"other":1},"user_id":7}`,
		`{"prompt":"x","user":null,"session_id":"s"}`,
		`{"prompt":"x","user":"","session_id":"s"}`,
		`{"prompt":"no key at all","max_completion_tokens":3,"n":2}`,
		`[1,2,3]`,
		`{"prompt":`,
		`null`,
		``,
	}
	for _, b := range bodies {
		for _, hdr := range []string{"", "hdr-key"} {
			h := http.Header{}
			if hdr != "" {
				h.Set("X-Session-ID", hdr)
			}
			got := parseRequest(h.Get, []byte(b), 256, 2048)
			want := parseBody([]byte(b), 256, 2048)
			want.key = policy.SessionKey(h.Get, []byte(b))
			if got.key != want.key || got.promptTokens != want.promptTokens || got.decodeTokens != want.decodeTokens ||
				got.prefixHash != want.prefixHash || !slices.Equal(got.prefixBlocks, want.prefixBlocks) {
				t.Errorf("body %q header %q: one pass %+v, two passes %+v", b, hdr, got, want)
			}
		}
	}
}
