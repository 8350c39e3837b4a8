package engine

import (
	"encoding/json"
	"testing"
)

// The shared options are embedded, so their keys must stay top-level in
// both request bodies (vLLM's flat schema), never nested.
func TestSamplingOptionsAreTopLevelKeys(t *testing.T) {
	body := []byte(`{"model":"m","max_tokens":3,"temperature":0.5,"top_p":0.9,"top_k":4,"min_p":0.1,"seed":7,"n":2,
		"stop":["x"],"stream":true,"stream_options":{"include_usage":true},"ignore_eos":true,"return_token_ids":true,"request_id":"r1"}`)
	check := func(name string, o SamplingOptions) {
		t.Helper()
		if o.MaxTokens == nil || *o.MaxTokens != 3 || o.Temperature == nil || *o.Temperature != 0.5 || o.TopP == nil || *o.TopP != 0.9 ||
			o.TopK == nil || *o.TopK != 4 || o.MinP == nil || *o.MinP != 0.1 || o.Seed == nil || *o.Seed != 7 || o.N == nil || *o.N != 2 ||
			string(o.Stop) != `["x"]` || !o.Stream || o.StreamOptions == nil || !o.StreamOptions.IncludeUsage ||
			!o.IgnoreEOS || !o.ReturnTokenIDs || o.RequestID != "r1" {
			t.Fatalf("%s: options not decoded from top-level keys: %+v", name, o)
		}
	}
	var c CompletionRequest
	if err := json.Unmarshal(body, &c); err != nil {
		t.Fatal(err)
	}
	check("completion", c.SamplingOptions)
	var ch ChatRequest
	if err := json.Unmarshal(body, &ch); err != nil {
		t.Fatal(err)
	}
	check("chat", ch.SamplingOptions)

	out, err := json.Marshal(ChatRequest{Model: "m", SamplingOptions: SamplingOptions{RequestID: "r2"}})
	if err != nil {
		t.Fatal(err)
	}
	var flat map[string]json.RawMessage
	if err := json.Unmarshal(out, &flat); err != nil {
		t.Fatal(err)
	}
	if _, nested := flat["SamplingOptions"]; nested || string(flat["request_id"]) != `"r2"` {
		t.Fatalf("encoded %s", out)
	}
}
