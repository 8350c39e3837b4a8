package vllmtok

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/model/hftokenizer"
)

// fakeVLLM serves /tokenize and /detokenize with the request and response
// shapes of vLLM's vllm/entrypoints/serve/tokenize/protocol.py, backed by a
// real hftokenizer fixture. Requests are decoded strictly, so a field the
// client invents (or misspells) fails the test.
func fakeVLLM(t *testing.T, tok *hftokenizer.Tokenizer, bos int32) *httptest.Server {
	t.Helper()
	decode := func(w http.ResponseWriter, r *http.Request, v any) bool {
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "want POST application/json", http.StatusMethodNotAllowed)
			return false
		}
		if err := dec.Decode(v); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
				"message": err.Error(), "type": "BadRequestError", "param": nil, "code": 400}})
			return false
		}
		return true
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/tokenize", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model            *string `json:"model"`
			Prompt           *string `json:"prompt"`
			AddSpecialTokens *bool   `json:"add_special_tokens"`
			ReturnTokenStrs  *bool   `json:"return_token_strs"`
		}
		if !decode(w, r, &req) {
			return
		}
		if req.Prompt == nil || req.AddSpecialTokens == nil || req.Model == nil || *req.Model != "qwen-fixture" {
			http.Error(w, "missing prompt, add_special_tokens or model", http.StatusUnprocessableEntity)
			return
		}
		ids := tok.Encode(*req.Prompt)
		if *req.AddSpecialTokens {
			ids = append([]int32{bos}, ids...)
		}
		if ids == nil {
			ids = []int32{} // pydantic serialises an empty list as []
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"count": len(ids), "max_model_len": 32768, "tokens": ids})
	})
	mux.HandleFunc("/detokenize", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model  *string  `json:"model"`
			Tokens *[]int64 `json:"tokens"`
		}
		if !decode(w, r, &req) {
			return
		}
		if req.Tokens == nil {
			http.Error(w, "tokens required", http.StatusUnprocessableEntity)
			return
		}
		ids := make([]int32, len(*req.Tokens))
		for i, v := range *req.Tokens {
			ids[i] = int32(v)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"prompt": tok.Decode(ids)})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func fixture(t *testing.T) *hftokenizer.Tokenizer {
	tok, err := hftokenizer.Load("../testdata/qwen2/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestClientMatchesLocal(t *testing.T) {
	tok := fixture(t)
	bos, _ := tok.TokenID("<|endoftext|>")
	srv := fakeVLLM(t, tok, bos)
	c := New(srv.URL+"/", "qwen-fixture")
	local := hftokenizer.Local{T: tok}
	ctx := context.Background()

	for _, text := range []string{"", "lower newer 010;}\n", "<|im_start|>user\nhi 🤗<|im_end|>", "  \t\n"} {
		got, err := c.Encode(ctx, text)
		if err != nil {
			t.Fatalf("Encode(%q): %v", text, err)
		}
		want, _ := local.Encode(ctx, text)
		if !slices.Equal(got, want) {
			t.Errorf("Encode(%q) = %v, local %v", text, got, want)
		}
		back, err := c.Decode(ctx, got)
		if err != nil {
			t.Fatalf("Decode: %v", err)
		}
		if back != text {
			t.Errorf("Decode(Encode(%q)) = %q", text, back)
		}
	}

	// add_special_tokens is sent as set: true makes the server prepend its BOS.
	c.AddSpecialTokens = true
	got, err := c.Encode(ctx, "lower")
	if err != nil || len(got) == 0 || got[0] != bos {
		t.Errorf("with AddSpecialTokens: %v, %v (want leading %d)", got, err, bos)
	}
}

func TestClientErrors(t *testing.T) {
	tok := fixture(t)
	srv := fakeVLLM(t, tok, 0)
	ctx := context.Background()

	// A wrong model name is rejected by the server; the error names the URL.
	_, err := New(srv.URL, "other").Encode(ctx, "x")
	if err == nil || !strings.Contains(err.Error(), srv.URL+"/tokenize") || !strings.Contains(err.Error(), "422") {
		t.Errorf("wrong model: err = %v", err)
	}

	errSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/tokenize":
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":{"message":"prompt too long","type":"BadRequestError","code":400}}`))
		case "/detokenize":
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"object":"error","message":"The model x does not exist.","code":404}`))
		}
	}))
	defer errSrv.Close()
	c := New(errSrv.URL, "x")
	if _, err := c.Encode(ctx, "x"); err == nil || !strings.Contains(err.Error(), "prompt too long") {
		t.Errorf("nested ErrorResponse: err = %v", err)
	}
	if _, err := c.Decode(ctx, []int32{1}); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("flat error: err = %v", err)
	}

	badSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/tokenize" {
			_, _ = w.Write([]byte(`{"count":1,"max_model_len":8,"tokens":[-3]}`))
			return
		}
		_, _ = w.Write([]byte(`{"text":"wrong field"}`))
	}))
	defer badSrv.Close()
	c = New(badSrv.URL, "")
	if _, err := c.Encode(ctx, "x"); err == nil || !strings.Contains(err.Error(), "tokens[0]") {
		t.Errorf("negative id: err = %v", err)
	}
	if _, err := c.Decode(ctx, nil); err == nil || !strings.Contains(err.Error(), `no "prompt"`) {
		t.Errorf("missing prompt: err = %v", err)
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := New(srv.URL, "qwen-fixture").Encode(cctx, "x"); err == nil {
		t.Error("cancelled context: no error")
	}
}

// The request bodies carry exactly the documented fields.
func TestRequestShapes(t *testing.T) {
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b bytes.Buffer
		_, _ = b.ReadFrom(r.Body)
		bodies = append(bodies, r.URL.Path+" "+b.String())
		if r.URL.Path == "/tokenize" {
			_, _ = w.Write([]byte(`{"count":0,"max_model_len":8,"tokens":[]}`))
		} else {
			_, _ = w.Write([]byte(`{"prompt":""}`))
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	_, _ = New(srv.URL, "m").Encode(ctx, "hi")
	_, _ = New(srv.URL, "").Decode(ctx, nil)
	want := []string{
		`/tokenize {"model":"m","prompt":"hi","add_special_tokens":false}`,
		`/detokenize {"tokens":[]}`,
	}
	if !slices.Equal(bodies, want) {
		t.Errorf("bodies %q, want %q", bodies, want)
	}
}
