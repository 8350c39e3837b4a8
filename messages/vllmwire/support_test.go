package vllmwire

import (
	"encoding/json"
	"math"
	"slices"
	"testing"
)

func TestSupportFromCompletionFixture(t *testing.T) {
	// testdata/vllm_completion_routed_uint8.json: top_logprobs as vLLM's
	// completions API writes them (vllm/entrypoints/openai/completion/serving.py,
	// token_id:N keys with return_tokens_as_token_ids, -9999.0 for -inf).
	var ans struct {
		Choices []struct {
			TokenIDs []int32 `json:"token_ids"`
			Logprobs struct {
				TokenLogprobs []float32            `json:"token_logprobs"`
				TopLogprobs   []map[string]float64 `json:"top_logprobs"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	readJSON(t, "testdata/vllm_completion_routed_uint8.json", &ans)
	ch := ans.Choices[0]
	rows, err := ParseTopLogprobs(ch.Logprobs.TopLogprobs)
	if err != nil {
		t.Fatal(err)
	}
	sup, err := SupportSets(rows, ch.TokenIDs, 3)
	if err != nil {
		t.Fatal(err)
	}
	// token 0: 21 was filtered (-9999) → {11, 20, -1}; token 1: all three
	// alive; token 2: strongest first.
	want := []int32{11, 20, -1, 12, 20, 22, 30, 13, 31}
	if !slices.Equal(sup, want) {
		t.Fatalf("support %v, want %v", sup, want)
	}
	lps, err := SupportLogprobs(rows, ch.TokenIDs, ch.Logprobs.TokenLogprobs, sup, 3)
	if err != nil {
		t.Fatal(err)
	}
	// token 0: -0.5 - log(e^-0.5 + e^-1)
	w0 := -0.5 - math.Log(math.Exp(-0.5)+math.Exp(-1))
	if math.Abs(float64(lps[0])-w0) > 1e-6 {
		t.Fatalf("support logprob %v, want %v", lps[0], w0)
	}
	for i, lp := range lps {
		if lp > 0 || lp < ch.Logprobs.TokenLogprobs[i]-1e-6 {
			t.Fatalf("token %d: support logprob %v not in [raw %v, 0]", i, lp, ch.Logprobs.TokenLogprobs[i])
		}
	}
}

func TestSupportSampledReplacesWeakest(t *testing.T) {
	rows := [][]Candidate{{{1, -0.1}, {2, -0.2}, {3, -0.3}}, nil, {{5, -1}, {5, -1}}}
	sup, err := SupportSets(rows, []int32{9, 4, 6}, 2)
	if err != nil {
		t.Fatal(err)
	}
	// 9 is missing: it replaces 2 (the weakest kept); a nil row yields the
	// sampled id alone; duplicates collapse.
	if want := []int32{1, 9, 4, -1, 5, 6}; !slices.Equal(sup, want) {
		t.Fatalf("support %v, want %v", sup, want)
	}
}

func TestParseTopLogprobsErrors(t *testing.T) {
	for _, in := range []string{`[{"hello": -1}]`, `[{"token_id:-3": -1}]`, `[{"token_id:x": -1}]`} {
		var top []map[string]float64
		if err := json.Unmarshal([]byte(in), &top); err != nil {
			t.Fatal(err)
		}
		if _, err := ParseTopLogprobs(top); err == nil {
			t.Fatalf("%s: no error", in)
		}
	}
	if _, err := SupportSets([][]Candidate{nil}, []int32{1, 2}, 2); err == nil {
		t.Fatal("row/token count mismatch accepted")
	}
}
