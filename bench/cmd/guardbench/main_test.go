package main

import (
	"encoding/json"
	"testing"
	"time"
)

// The completion answer is vLLM's shape with n tokens.
func TestCompletionBody(t *testing.T) {
	var c struct {
		Choices []struct {
			TokenIDs []int `json:"token_ids"`
			Logprobs struct {
				TokenLogprobs []float64 `json:"token_logprobs"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(completionBody(64), &c); err != nil || len(c.Choices) != 1 ||
		len(c.Choices[0].TokenIDs) != 64 || len(c.Choices[0].Logprobs.TokenLogprobs) != 64 {
		t.Fatalf("%+v %v", c, err)
	}
}

// One short repetition measures all three paths with every request
// answered (the guard lets the keyed load through).
func TestMeasureRuns(t *testing.T) {
	r, err := measure("tiny", []byte(`{"ok":true}`), 0, 1, 150*time.Millisecond, 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Errors != 0 || len(r.Ratios) != 1 || r.Direct[0] <= 0 || r.Proxy[0] <= 0 || r.Guard[0] <= 0 || r.CPUGuard <= 0 {
		t.Fatalf("%+v", r)
	}
}
