package policy

import (
	"strconv"
	"strings"
	"testing"
)

// TestSessionKey checks vllm-router's key rules (vllm-project/router
// src/policies/hash_key.rs: SESSION_HEADER_NAMES, extract_hash_key,
// extract_field_value, extract_nested_field_value): header priority, body
// field priority, and how the body values are read — the text between a
// string's quotes (an empty string ends the search), the text of a
// non-string value up to the first delimiter (null → "null", 42 → "42"),
// session_id nested in session_params.
func TestSessionKey(t *testing.T) {
	long := `{"prompt":"` + strings.Repeat("x", 200) + `"}`
	cases := []struct {
		name    string
		headers map[string]string
		body    string
		want    Key
	}{
		{"session header wins", map[string]string{"x-session-id": "s1", "x-user-id": "u"}, `{"user":"b"}`, Key{"s1", "x-session-id"}},
		{"user header", map[string]string{"x-user-id": "u", "x-trace-id": "t"}, ``, Key{"u", "x-user-id"}},
		{"tenant", map[string]string{"x-tenant-id": "t"}, ``, Key{"t", "x-tenant-id"}},
		{"correlation before request id", map[string]string{"x-correlation-id": "c", "x-request-id": "r"}, ``, Key{"c", "x-correlation-id"}},
		{"request id", map[string]string{"x-request-id": "r", "x-trace-id": "t"}, ``, Key{"r", "x-request-id"}},
		{"trace", map[string]string{"x-trace-id": "t"}, `{"user":"b"}`, Key{"t", "x-trace-id"}},
		{"empty header skipped", map[string]string{"x-session-id": ""}, `{"user":"b"}`, Key{"b", "user"}},
		{"session_params first", nil, `{"user":"u","session_id":"s","session_params":{"session_id":"sp"}}`, Key{"sp", "session_params.session_id"}},
		{"session_params without session_id", nil, `{"session_params":{"other":1},"user":"u"}`, Key{"u", "user"}},
		{"session_params null", nil, `{"session_params":null,"session_id":"s"}`, Key{"s", "session_id"}},
		{"user before session_id", nil, `{"session_id":"s","user":"u"}`, Key{"u", "user"}},
		{"session_id before user_id", nil, `{"session_id":"s","user_id":"id"}`, Key{"s", "session_id"}},
		{"user_id", nil, `{"user_id":"id"}`, Key{"id", "user_id"}},
		// Values, as extract_field_value reads them.
		{"number", nil, `{"user_id":42}`, Key{"42", "user_id"}},
		{"float", nil, `{"session_id":4.5,"user_id":"x"}`, Key{"4.5", "session_id"}},
		{"null counts as text", nil, `{"user":null,"session_id":"s"}`, Key{"null", "user"}},
		{"bool", nil, `{"user":true}`, Key{"true", "user"}},
		{"object up to the first delimiter", nil, `{"user":{"id":1}}`, Key{`{"id":1`, "user"}},
		{"array up to the first delimiter", nil, `{"user":[1,2]}`, Key{`[1`, "user"}},
		{"escapes not decoded", nil, `{"user":"a\"b"}`, Key{`a\`, "user"}},
		{"empty string ends the search", nil, `{"user":"","session_id":"s"}`, Key{"", "user"}},
		{"empty nested ends the search", nil, `{"session_params":{"session_id":""},"user":"u"}`, Key{"", "session_params.session_id"}},
		{"nested number", nil, `{"session_params":{"session_id":7}}`, Key{"7", "session_params.session_id"}},
		// Body text fallback.
		{"malformed JSON → body text", nil, `{"user":"u"`, Key{`{"user":"u"`, SourceBody}},
		{"non-object JSON", nil, `[1,2]`, Key{`[1,2]`, SourceBody}},
		{"no key fields", nil, `{"prompt":"hi"}`, Key{`{"prompt":"hi"}`, SourceBody}},
		{"text not trimmed", nil, ` {"prompt":"hi"} `, Key{` {"prompt":"hi"} `, SourceBody}},
		{"long body hashed", nil, long, Key{"body:" + strconv.FormatUint(Hash64(long), 16), SourceBody}},
		{"100 bytes kept", nil, strings.Repeat("y", 100), Key{strings.Repeat("y", 100), SourceBody}},
		{"nothing", nil, ``, Key{}},
	}
	for _, tc := range cases {
		h := func(name string) string { return tc.headers[name] }
		if got := SessionKey(h, []byte(tc.body)); got != tc.want {
			t.Errorf("%s: got %+v want %+v", tc.name, got, tc.want)
		}
	}
	if got := SessionKey(nil, []byte(`{"user":"u"}`)); got != (Key{"u", "user"}) {
		t.Errorf("nil header lookup: %+v", got)
	}
	if !(Key{"x", SourceBody}).HashOnly() || (Key{"x", "user"}).HashOnly() {
		t.Fatal("HashOnly")
	}
	if !(Key{"", "user"}).Found() || (Key{}).Found() {
		t.Fatal("Found")
	}
}
func TestHash64IsFNV1a(t *testing.T) {
	// Published FNV-1a 64 test vectors.
	for in, want := range map[string]uint64{"": 0xcbf29ce484222325, "a": 0xaf63dc4c8601ec8c, "foobar": 0x85944171f73967e8} {
		if got := Hash64(in); got != want {
			t.Errorf("Hash64(%q) = %x want %x", in, got, want)
		}
		if HashBytes([]byte(in)) != want {
			t.Errorf("HashBytes(%q)", in)
		}
	}
	if rendezvous("s", "u") != RingHash("s:u") {
		t.Fatal("rendezvous must hash \"key:url\"")
	}
}

func TestPrefixBlockHashes(t *testing.T) {
	a := []byte(strings.Repeat("s", 10) + "conversation A history")
	b := []byte(strings.Repeat("s", 10) + "conversation B history")
	ha := PrefixBlockHashes(nil, a, 5, 100)
	hb := PrefixBlockHashes(nil, b, 5, 100)
	if len(ha) != len(a)/5 || len(hb) != len(b)/5 {
		t.Fatalf("block counts %d %d, want %d", len(ha), len(hb), len(a)/5)
	}
	// Equal exactly as far as the leading blocks are equal: "sssss",
	// "sssss", "conve", "rsati", "on " + A/B differ from block 5 on.
	for i := range ha {
		if same := ha[i] == hb[i]; same != (i < 4) {
			t.Errorf("block %d: equal=%v", i, same)
		}
	}
	if ha[1] != HashBytes(a[:10])|1 {
		t.Error("block 2 is not the FNV-1a hash of the first 10 bytes")
	}
	if got := PrefixBlockHashes(nil, a, 5, 2); len(got) != 2 {
		t.Errorf("maxBlocks ignored: %d", len(got))
	}
	if got := PrefixBlockHashes(nil, a, 0, 9); len(got) != 0 {
		t.Errorf("block 0: %v", got)
	}
}
