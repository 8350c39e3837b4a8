package proxy

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// scanCorpus are bodies where a hand-written JSON pass could go wrong:
// escapes, control characters, numbers, nesting, duplicate keys, keys
// encoding/json matches case-insensitively, type errors in the integer
// fields, trailing garbage.
var scanCorpus = []string{
	`{"input_ids":[151643,9707,11],"sampling_params":{"max_new_tokens":8,"temperature":1},"return_logprob":true}`,
	`{"input_ids":[1],"sampling_params":null,"input_ids":[1,2]}`,
	`{"prompt":"hello","max_tokens":16}`,
	` {"prompt" : [1, 2, 3] , "max_tokens" : null , "n" : 3 } `,
	`{"prompt":"a\"b\\c\/d\b\f\n\r\t\u00e9\uD83D\uDE00","user":"u"}`,
	`{"prompt":"bad escape \x"}`,
	`{"prompt":"bad unicode \u12G4"}`,
	`{"prompt":"short unicode \u12"}`,
	"{\"prompt\":\"raw control \x01 char\"}",
	"{\"prompt\":\"raw newline \n in string\"}",
	"{\"prompt\":\"tab\tinside\"}",
	`{"prompt":"unterminated`,
	`{"prompt":"eight bytes ok","x":"01234567"}`,
	"{\"prompt\":\"invalid utf8 \xff\xfe bytes\"}",
	`{"max_tokens":1e2}`,
	`{"max_tokens":16.0}`,
	`{"max_tokens":-0}`,
	`{"max_tokens":-5}`,
	`{"max_tokens":"16"}`,
	`{"max_tokens":true}`,
	`{"max_tokens":99999999999999999999999}`,
	`{"max_tokens":01}`,
	`{"max_tokens":-}`,
	`{"max_tokens":1.}`,
	`{"max_tokens":1e}`,
	`{"max_tokens":.5}`,
	`{"max_tokens":5,"max_tokens":7}`,
	`{"max_tokens":5,"max_tokens":null}`,
	`{"max_tokens":"x","max_tokens":7}`,
	`{"n":2,"max_completion_tokens":3}`,
	`{"Prompt":"upper case key","MAX_TOKENS":4}`,
	`{"prompt":"a","PROMPT":"b"}`,
	`{"\u0070rompt":"escaped key"}`,
	`{"ſession_id":"long s folds onto s"}`,
	`{"user_id":7,"session_id":null}`,
	`{"session_params":{"session_id":"sp"},"user":"u"}`,
	`{"session_params":[1],"user":"u"}`,
	`{"messages":[{"role":"user","content":"hi","tool_calls":[{"a":{"b":[true,false,null]}}]}]}`,
	`{"prompt":"x",}`,
	`{"prompt":"x" "user":"y"}`,
	`{"prompt":"x"} trailing`,
	`{"prompt":"x"}}`,
	`{"prompt":tru}`,
	`{"prompt":nul}`,
	`{"prompt":[1,2,]}`,
	`{"prompt":[1 2]}`,
	`{prompt:"x"}`,
	`{"prompt"}`,
	`{"a":{"b":{"c":{}}},"prompt":[],"user":{}}`,
	`{}`,
	`{`,
	`}`,
	`[{"prompt":"x"}]`,
	`"just a string"`,
	`42`,
	`null`,
	` null `,
	`true`,
	``,
	` `,
	strings.Repeat(`[`, 600) + strings.Repeat(`]`, 600),
	`{"prompt":` + strings.Repeat(`[`, 600) + strings.Repeat(`]`, 600) + `}`,
	`{"prompt":` + strings.Repeat(`[`, 600) + strings.Repeat(`]`, 599) + `}`,
}

// decodeRef is the reference: json.Unmarshal into requestBody.
func decodeRef(body []byte) (requestBody, bool) {
	var req requestBody
	ok := len(body) > 0 && json.Unmarshal(body, &req) == nil
	return req, ok
}

func sameInt(a, b *int) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

// checkScan holds decodeBody (scanBody, encoding/json where it declines)
// to json.Unmarshal: the same success and, on success, the same fields.
func checkScan(t *testing.T, body []byte) {
	t.Helper()
	want, wantOK := decodeRef(body)
	var got requestBody
	var ints [3]int
	gotOK := decodeBody(body, &got, &ints)
	if gotOK != wantOK {
		t.Fatalf("body %q: decodeBody ok=%v, json.Unmarshal ok=%v", body, gotOK, wantOK)
	}
	if !wantOK {
		return
	}
	raws := func(r *requestBody) [][]byte {
		return [][]byte{r.Prompt, r.Messages, r.SessionParams, r.User, r.SessionID, r.UserID, r.InputIDs, r.SamplingParams}
	}
	if !slices.EqualFunc(raws(&got), raws(&want), bytes.Equal) ||
		!sameInt(got.MaxTokens, want.MaxTokens) || !sameInt(got.MaxCompletionTokens, want.MaxCompletionTokens) || !sameInt(got.N, want.N) {
		t.Fatalf("body %q: decodeBody %+v, json.Unmarshal %+v", body, got, want)
	}
	// scanOK and scanInvalid are claims about validity: hold them to json.Valid.
	switch scanBody(body, &requestBody{}, &ints) {
	case scanOK:
		if !json.Valid(body) {
			t.Fatalf("body %q: scanOK but not valid JSON", body)
		}
	case scanInvalid:
		if json.Valid(body) {
			t.Fatalf("body %q: scanInvalid but valid JSON", body)
		}
	}
}

func TestScanBodyMatchesEncodingJSON(t *testing.T) {
	for _, b := range scanCorpus {
		checkScan(t, []byte(b))
	}
}

// The fast path must actually be taken for the bodies the router sees
// (else the benchmark would measure encoding/json).
func TestScanBodyFastPathForOrdinaryBodies(t *testing.T) {
	for _, b := range []string{
		`{"model":"m","prompt":"You are a helpful agent.","max_tokens":16,"temperature":0.0,"stream":false}`,
		`{"model":"m","prompt":[1,2,3,4],"max_tokens":8,"logprobs":0,"session_id":"s-1"}`,
		`{"model":"m","messages":[{"role":"system","content":"Be brief.\nThanks \"you\""},{"role":"user","content":"hi \u00e9"}],"max_completion_tokens":64,"n":2}`,
	} {
		var req requestBody
		var ints [3]int
		if r := scanBody([]byte(b), &req, &ints); r != scanOK {
			t.Errorf("body %q: scanBody %v, want scanOK", b, r)
		}
	}
}

// Every split point of an escape-heavy string crosses scanBody's 8-byte
// steps at a different offset.
func TestScanBodyStringAlignment(t *testing.T) {
	for pad := range 17 {
		for _, inner := range []string{`\"`, `\\`, `\u0041`, "\x1f", `"`, "é", `\/`} {
			body := `{"prompt":"` + strings.Repeat("a", pad) + inner + strings.Repeat("b", 9) + `","max_tokens":3}`
			checkScan(t, []byte(body))
		}
	}
}

// A long prompt (a many-turn history) and its key agree with the
// reference, and parseRequest agrees with parseBody.
func TestParseRequestLargeBody(t *testing.T) {
	var sb strings.Builder
	sb.WriteString(`{"model":"m","messages":[`)
	for i := range 400 {
		if i > 0 {
			sb.WriteString(",")
		}
		sb.WriteString(`{"role":"user","content":"turn ` + strings.Repeat(`tool output \"quoted\" \\ line\n`, 10) + `"}`)
	}
	sb.WriteString(`],"max_tokens":128,"user":"u-42"}`)
	body := []byte(sb.String())
	if len(body) < 100<<10 {
		t.Fatalf("body is %d bytes, want > 100 KiB", len(body))
	}
	checkScan(t, body)
	got := parseRequest(http.Header{}.Get, body, 256, 2048)
	want := parseBody(body, 256, 2048)
	if got.key.Value != "u-42" || got.promptTokens != want.promptTokens || got.decodeTokens != 128 ||
		got.prefixHash != want.prefixHash || !slices.Equal(got.prefixBlocks, want.prefixBlocks) || len(got.prefixBlocks) != maxPrefixBlocks {
		t.Errorf("large body: got %+v (key %+v), want %+v", got, got.key, want)
	}
}

func FuzzScanBody(f *testing.F) {
	for _, b := range scanCorpus {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkScan(t, body) })
}

func BenchmarkParseRequest(b *testing.B) {
	small := []byte(`{"model":"m","prompt":"You are a helpful agent. Solve the task step by step, calling tools when needed. Task: list the files.","max_tokens":16,"temperature":0.0,"logprobs":0,"stream":false}`)
	var sb strings.Builder
	sb.WriteString(`{"model":"m","messages":[`)
	for i := range 200 {
		if i > 0 {
			sb.WriteString(",")
		}
		sb.WriteString(`{"role":"user","content":"` + strings.Repeat(`tool output line with some words\n`, 10) + `"}`)
	}
	sb.WriteString(`],"max_tokens":128}`)
	large := []byte(sb.String())
	h := http.Header{"X-Session-Id": {"s-1"}}
	for _, c := range []struct {
		name string
		body []byte
	}{{"small", small}, {"large_70KB", large}} {
		b.Run(c.name+"/scan", func(b *testing.B) {
			b.SetBytes(int64(len(c.body)))
			b.ReportAllocs()
			for b.Loop() {
				parseRequest(h.Get, c.body, 256, 2048)
			}
		})
		b.Run(c.name+"/encoding_json", func(b *testing.B) {
			b.SetBytes(int64(len(c.body)))
			b.ReportAllocs()
			for b.Loop() {
				parseBody(c.body, 256, 2048)
			}
		})
	}
}
