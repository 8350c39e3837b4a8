package proxy

import (
	"encoding/json"

	"github.com/asyncrl/asyncrl/actors/router/policy"
)

// bodyInfo is what routing needs from an OpenAI-style request body.
type bodyInfo struct {
	promptTokens int
	decodeTokens int
	prefixHash   uint64
}

// parseBody estimates prompt and decode tokens and hashes the prompt's
// leading bytes. It never fails: malformed JSON gives a size-based guess
// and no prefix. Token counts are estimates (≈ 4 bytes per token for
// text) because the router has no tokenizer; they only weigh load.
func parseBody(body []byte, defaultDecode, prefixBytes int) bodyInfo {
	info := bodyInfo{promptTokens: len(body) / 4, decodeTokens: defaultDecode}
	var req struct {
		Prompt              json.RawMessage `json:"prompt"`
		Messages            json.RawMessage `json:"messages"`
		MaxTokens           *int            `json:"max_tokens"`
		MaxCompletionTokens *int            `json:"max_completion_tokens"`
		N                   *int            `json:"n"`
	}
	if json.Unmarshal(body, &req) != nil {
		return info
	}
	src := req.Prompt
	if len(src) == 0 {
		src = req.Messages
	}
	if len(src) > 0 {
		var ids []int
		if json.Unmarshal(src, &ids) == nil {
			info.promptTokens = len(ids)
		} else {
			info.promptTokens = len(src) / 4
		}
		p := src
		if len(p) > prefixBytes {
			p = p[:prefixBytes]
		}
		if prefixBytes > 0 {
			info.prefixHash = policy.HashBytes(p) | 1 // never 0 ("unknown")
		}
	}
	switch {
	case req.MaxTokens != nil && *req.MaxTokens >= 0:
		info.decodeTokens = *req.MaxTokens
	case req.MaxCompletionTokens != nil && *req.MaxCompletionTokens >= 0:
		info.decodeTokens = *req.MaxCompletionTokens
	}
	if req.N != nil && *req.N > 1 {
		info.decodeTokens *= *req.N
	}
	return info
}
