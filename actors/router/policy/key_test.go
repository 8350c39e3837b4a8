package policy

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
)

func TestExtractSessionKey(t *testing.T) {
	long := `{"prompt":"` + strings.Repeat("x", 200) + `"}`
	cases := []struct {
		name    string
		headers map[string]string
		body    string
		want    Key
	}{
		{"session header wins", map[string]string{"X-Session-ID": "s1", "X-User-ID": "u"}, `{"user":"b"}`, Key{"s1", "x-session-id"}},
		{"user header", map[string]string{"X-User-ID": "u", "X-Trace-ID": "t"}, ``, Key{"u", "x-user-id"}},
		{"tenant", map[string]string{"X-Tenant-ID": "t"}, ``, Key{"t", "x-tenant-id"}},
		{"correlation", map[string]string{"X-Correlation-ID": "c", "X-Request-ID": "r"}, ``, Key{"c", "x-correlation-id"}},
		{"request id", map[string]string{"X-Request-ID": "r", "X-Trace-ID": "t"}, ``, Key{"r", "x-request-id"}},
		{"trace", map[string]string{"X-Trace-ID": "t"}, `{"user":"b"}`, Key{"t", "x-trace-id"}},
		{"blank header skipped", map[string]string{"X-Session-ID": "  "}, `{"user":"b"}`, Key{"b", "user"}},
		{"session_params first", nil, `{"user":"u","session_id":"s","session_params":{"session_id":"sp"}}`, Key{"sp", "session_params.session_id"}},
		{"user before session_id", nil, `{"session_id":"s","user":"u"}`, Key{"u", "user"}},
		{"session_id", nil, `{"session_id":"s","user_id":"id"}`, Key{"s", "session_id"}},
		{"user_id number", nil, `{"user_id":42}`, Key{"42", "user_id"}},
		{"empty fields fall through", nil, `{"user":"","session_params":{"session_id":""}}`, Key{`{"user":"","session_params":{"session_id":""}}`, SourceBody}},
		{"malformed JSON → body text", nil, `{"user":"u"`, Key{`{"user":"u"`, SourceBody}},
		{"non-object JSON", nil, `[1,2]`, Key{`[1,2]`, SourceBody}},
		{"long body hashed", nil, long, Key{"body:" + strconv.FormatUint(Hash64(long), 16), SourceBody}},
		{"nothing", nil, ``, Key{}},
	}
	for _, tc := range cases {
		h := http.Header{}
		for k, v := range tc.headers {
			h.Set(k, v)
		}
		if got := ExtractSessionKey(h, []byte(tc.body)); got != tc.want {
			t.Errorf("%s: got %+v want %+v", tc.name, got, tc.want)
		}
	}
	if !(Key{"x", SourceBody}).HashOnly() || (Key{"x", "user"}).HashOnly() {
		t.Fatal("HashOnly")
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
