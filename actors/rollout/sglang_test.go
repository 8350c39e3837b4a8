package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/actors/router/policy"
	"github.com/asyncrl/asyncrl/engine/driver"
	"github.com/asyncrl/asyncrl/engine/enginetest"
)

// Through the real router to the SGLang fake (its /generate answer is the
// engine's fixture, testdata/sglang/generate.json): the turn goes as
// native /generate with the prompt's token ids, and the answer's
// output_ids, output_token_logprobs and finish reason come back with the
// router's version on every token.
func TestHTTPClientSGLangGenerate(t *testing.T) {
	f := enginetest.NewFake(driver.KindSGLang, enginetest.FakeOptions{})
	defer f.Close()
	r, url := startRouter(t, f.URL)
	if err := r.Apply(policy.SetVersion{URL: f.URL, Version: 7}); err != nil {
		t.Fatal(err)
	}
	c := &HTTPClient{BaseURL: url, Model: "Qwen/Qwen3-0.6B", Protocol: ProtocolSGLang, StopTokenIDs: []int32{151645}}
	turn := TurnRequest{SessionID: "traj-1", Tokens: []int32{151643, 9707, 11}, MaxTokens: 2, Temperature: 1, TopP: 1}
	out, err := c.Generate(context.Background(), turn)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(out.Tokens, []int32{279, 1156}) || !slices.Equal(out.Logprobs, []float32{-0.5234, -1.2031}) ||
		out.Finish != "length" || !slices.Equal(out.Versions, []int64{7, 7}) || out.Engine != f.URL {
		t.Fatalf("%+v", out)
	}
	call, ok := f.Last("/generate")
	if !ok {
		t.Fatal("no /generate call")
	}
	var sent map[string]any
	if err := json.Unmarshal(call.Body, &sent); err != nil {
		t.Fatal(err)
	}
	sp, _ := sent["sampling_params"].(map[string]any)
	if ids, _ := json.Marshal(sent["input_ids"]); string(ids) != "[151643,9707,11]" || sent["return_logprob"] != true ||
		sent["logprob_start_len"] != -1.0 || sp["max_new_tokens"] != 2.0 || sent["model"] != nil {
		t.Fatalf("sent %s", call.Body)
	}
	if ids, _ := json.Marshal(sp["stop_token_ids"]); string(ids) != "[151645]" {
		t.Fatalf("stop_token_ids %s", ids)
	}

	// The fixture's meta_info.prompt_tokens is 3: a 4-token prompt that
	// the engine saw as 3 (truncated) is refused.
	turn.Tokens = []int32{1, 151643, 9707, 11}
	if _, err := c.Generate(context.Background(), turn); !errors.Is(err, ErrEngine) || !strings.Contains(err.Error(), "prompt_tokens") {
		t.Fatalf("truncated prompt: %v", err)
	}
	defaultClient.CloseIdleConnections()
}

// Malformed answers fail the turn with the field that is wrong.
func TestDecodeSGLangAnswerRejects(t *testing.T) {
	h := http.Header{versionMinHeader: []string{"3"}}
	for name, tc := range map[string]struct{ body, want string }{
		"no output_ids":    {`{"meta_info":{}}`, "no output_ids"},
		"short logprobs":   {`{"output_ids":[5,6],"meta_info":{"output_token_logprobs":[[-1,5,null]]}}`, "2 output_ids but 1"},
		"token mismatch":   {`{"output_ids":[5,6],"meta_info":{"output_token_logprobs":[[-1,5,null],[-2,7,null]]}}`, "is for token 7"},
		"null logprob":     {`{"output_ids":[5],"meta_info":{"output_token_logprobs":[[null,5,null]]}}`, "not [logprob"},
		"no version":       {`{"output_ids":[5],"meta_info":{"output_token_logprobs":[[-1,5,null]]}}`, "no weight versions"},
		"prompt truncated": {`{"output_ids":[],"meta_info":{"prompt_tokens":1,"output_token_logprobs":[]}}`, "prompt_tokens is 1"},
	} {
		hh := h
		if name == "no version" {
			hh = http.Header{}
		}
		_, err := decodeSGLangAnswer([]byte(tc.body), hh, []int32{1, 2})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
	out, err := decodeSGLangAnswer([]byte(`{"output_ids":[5],"meta_info":{"prompt_tokens":2,"finish_reason":{"type":"stop","matched":151645},"output_token_logprobs":[[-0.25,5,null]]}}`), h, []int32{1, 2})
	if err != nil || out.Finish != "stop" || !slices.Equal(out.Versions, []int64{3}) || !slices.Equal(out.Logprobs, []float32{-0.25}) {
		t.Fatalf("%+v %v", out, err)
	}
}

// What the SGLang path cannot do is refused before anything is sent.
func TestHTTPClientSGLangRefusals(t *testing.T) {
	c := &HTTPClient{BaseURL: "http://127.0.0.1:1", Protocol: ProtocolSGLang}
	turn := TurnRequest{Tokens: []int32{1}, MaxTokens: 1, Routes: RouteSpec{Layers: 2, TopK: 2, NumExperts: 8}}
	if _, err := c.Generate(context.Background(), turn); err == nil || !strings.Contains(err.Error(), "routed experts") {
		t.Fatalf("routes: %v", err)
	}
	c.SupportFromLogprobs = 4
	if _, err := c.Generate(context.Background(), TurnRequest{Tokens: []int32{1}, MaxTokens: 1}); err == nil || !strings.Contains(err.Error(), "support_from_logprobs") {
		t.Fatalf("support: %v", err)
	}
}

func TestProtocolForKinds(t *testing.T) {
	if p, err := ProtocolForKinds([]string{"sglang", "sglang"}); p != ProtocolSGLang || err != nil {
		t.Fatal(p, err)
	}
	if p, err := ProtocolForKinds([]string{"vllm", "builtin"}); p != ProtocolCompletions || err != nil {
		t.Fatal(p, err)
	}
	if p, err := ProtocolForKinds(nil); p != ProtocolCompletions || err != nil {
		t.Fatal(p, err)
	}
	if _, err := ProtocolForKinds([]string{"sglang", "vllm"}); err == nil || !strings.Contains(err.Error(), "1 of 2") {
		t.Fatal(err)
	}
}

// SGLang before and after PR #30917, through the vLLM-shaped completions
// decoder: the older answer (no token ids) fails every turn, the newer one
// decodes — why the SGLang path speaks /generate, which has token ids on
// both (TestHTTPClientSGLangGenerate).
func TestSGLangCompletionsBeforeAndAfterTokenIDs(t *testing.T) {
	fx := enginetest.MustFixtures(driver.KindSGLang)
	h := http.Header{versionMinHeader: []string{"1"}}
	prompt := []int32{151643, 9707, 11}
	if _, err := decodeAnswer(fx["completions"].Body(), h, prompt); err == nil || !strings.Contains(err.Error(), "token_ids") {
		t.Fatalf("before PR #30917: %v, want a missing token_ids error", err)
	}
	out, err := decodeAnswer(fx["completions_token_ids"].Body(), h, prompt)
	if err != nil || !slices.Equal(out.Tokens, []int32{279, 1156}) || !slices.Equal(out.Logprobs, []float32{-0.5234, -1.2031}) {
		t.Fatalf("after PR #30917: %+v %v", out, err)
	}
}
