package proxy

import (
	"encoding/json"

	"github.com/asyncrl/asyncrl/actors/router/policy"
)

// bodyInfo is what routing needs from an OpenAI-style request body.
type bodyInfo struct {
	key          policy.Key
	promptTokens int
	decodeTokens int
	prefixHash   uint64
	prefixBlocks []uint64 // policy.Request.PrefixBlocks, PrefixBytes each
}

// maxPrefixBlocks bounds the block hashes of one prompt (64 × 2 KiB =
// 128 KiB of prompt JSON, the length of a ~20k-token history as ids), so
// the router's prefix LRUs and lookups stay cheap for huge prompts.
const maxPrefixBlocks = 64

// requestBody is the part of an OpenAI-style request the router reads:
// token counts, the prompt for its prefix hash, and the session key
// fields, decoded in one pass (the body used to be decoded twice, once
// for the key and once for the counts, plus a third time for token ids).
type requestBody struct {
	policy.BodyKeyFields
	Prompt              json.RawMessage `json:"prompt"`
	Messages            json.RawMessage `json:"messages"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	N                   *int            `json:"n"`
	// SGLang's native /generate (the rollouts' protocol on SGLang
	// engines): the prompt as input_ids, the decode length as
	// sampling_params.max_new_tokens (io_struct.GenerateReqInput).
	InputIDs       json.RawMessage `json:"input_ids"`
	SamplingParams json.RawMessage `json:"sampling_params"`
}

// parseRequest extracts the session key (policy.SessionKey's priority:
// headers, then body fields, then body text) and parseBody's estimates
// from one pass over the body (scanBody; encoding/json only for the odd
// bodies scanBody leaves to it). The HTTP side of key extraction lives
// here so that the routing core never imports net/http: it gets the
// front end's header lookup.
func parseRequest(header func(name string) string, body []byte, defaultDecode, prefixBytes int) bodyInfo {
	var req requestBody
	var ints [3]int
	ok := decodeBody(body, &req, &ints)
	info := fromBody(&req, ok, body, defaultDecode, prefixBytes)
	if k, found := policy.HeaderKey(header); found {
		info.key = k
	} else if ok {
		info.key = policy.BodyKey(body, &req.BodyKeyFields)
	} else {
		info.key = policy.BodyKey(body, nil)
	}
	return info
}

// decodeBody fills req as json.Unmarshal(body, req) would and reports
// whether that succeeds: scanBody's single pass, or encoding/json where
// scanBody declines.
func decodeBody(body []byte, req *requestBody, ints *[3]int) bool {
	if len(body) == 0 {
		return false
	}
	switch scanBody(body, req, ints) {
	case scanOK:
		return true
	case scanInvalid:
		return false
	}
	*req = requestBody{}
	return json.Unmarshal(body, req) == nil
}

// parseBody estimates prompt and decode tokens and hashes the prompt's
// leading bytes. It never fails: malformed JSON gives a size-based guess
// and no prefix. Token counts are estimates (≈ 4 bytes per token for
// text) because the router has no tokenizer; they only weigh load. It is
// the reference decode (encoding/json) the tests hold parseRequest to.
func parseBody(body []byte, defaultDecode, prefixBytes int) bodyInfo {
	var req requestBody
	ok := json.Unmarshal(body, &req) == nil
	return fromBody(&req, ok, body, defaultDecode, prefixBytes)
}

func fromBody(req *requestBody, ok bool, body []byte, defaultDecode, prefixBytes int) bodyInfo {
	info := bodyInfo{promptTokens: len(body) / 4, decodeTokens: defaultDecode}
	if !ok {
		return info
	}
	src := req.Prompt
	if len(src) == 0 {
		src = req.Messages
	}
	if len(src) == 0 {
		src = req.InputIDs
	}
	if len(src) > 0 {
		if n, isIDs := countTokenIDs(src); isIDs {
			info.promptTokens = n
		} else {
			info.promptTokens = len(src) / 4
		}
		p := src
		if len(p) > prefixBytes {
			p = p[:prefixBytes]
		}
		if prefixBytes > 0 {
			info.prefixHash = policy.HashBytes(p) | 1 // never 0 ("unknown")
			info.prefixBlocks = policy.PrefixBlockHashes(nil, src, prefixBytes, maxPrefixBlocks)
		}
	}
	switch {
	case req.MaxTokens != nil && *req.MaxTokens >= 0:
		info.decodeTokens = *req.MaxTokens
	case req.MaxCompletionTokens != nil && *req.MaxCompletionTokens >= 0:
		info.decodeTokens = *req.MaxCompletionTokens
	case len(req.SamplingParams) > 0:
		var sp struct {
			MaxNewTokens *int `json:"max_new_tokens"`
		}
		if json.Unmarshal(req.SamplingParams, &sp) == nil && sp.MaxNewTokens != nil && *sp.MaxNewTokens >= 0 {
			info.decodeTokens = *sp.MaxNewTokens
		}
	}
	if req.N != nil && *req.N > 1 {
		info.decodeTokens *= *req.N
	}
	return info
}

// countTokenIDs counts the integers of a JSON array of token ids without
// decoding it again (json.Unmarshal already validated the body): it
// reports false unless raw is an array of plain integers.
func countTokenIDs(raw json.RawMessage) (int, bool) {
	i, j := 0, len(raw)
	for i < j && isSpace(raw[i]) {
		i++
	}
	for j > i && isSpace(raw[j-1]) {
		j--
	}
	if j-i < 2 || raw[i] != '[' || raw[j-1] != ']' {
		return 0, false
	}
	n, digits := 0, false
	for _, c := range raw[i+1 : j-1] {
		switch {
		case c >= '0' && c <= '9':
			if !digits {
				n++
			}
			digits = true
		case c == ',':
			digits = false
		case c == '-' || isSpace(c):
		default:
			return 0, false // floats, strings, nested arrays: not token ids
		}
	}
	return n, true
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
