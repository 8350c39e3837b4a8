package data

import (
	"testing"

	"github.com/asyncrl/asyncrl/model/hftokenizer"
)

// loadQwen2 is the byte-complete Qwen2-style tokenizer.json of model/hftokenizer's tests.
func loadQwen2(t *testing.T) *hftokenizer.Tokenizer {
	t.Helper()
	tok, err := hftokenizer.Load("../../model/hftokenizer/testdata/qwen2/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
