package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// Protocol is the generation API the rollout client speaks to the engines
// behind the router (the router forwards any path to any replica, so one
// run's replicas must all speak it).
type Protocol string

// The protocols.
const (
	// ProtocolCompletions is vLLM's /v1/completions, token ids in and out
	// (vLLM ≥ 0.10.2, the built-in engine). The zero value.
	ProtocolCompletions Protocol = ""
	// ProtocolSGLang is SGLang's native POST /generate: input_ids in,
	// output_ids and meta_info.output_token_logprobs out. It has both on
	// every SGLang release, where /v1/completions returns token ids only
	// since PR #30917 (July 2026) and text-keyed logprobs always.
	ProtocolSGLang Protocol = "sglang"
)

// ProtocolForKinds is the protocol for a run whose engines are of these
// kinds (config engine kinds: vllm, sglang, builtin): SGLang's when every
// engine is SGLang, completions when none is; a mix is an error, since
// the router would send a turn in one protocol to an engine of the other.
func ProtocolForKinds(kinds []string) (Protocol, error) {
	sg := 0
	for _, k := range kinds {
		if k == "sglang" {
			sg++
		}
	}
	switch {
	case sg == 0:
		return ProtocolCompletions, nil
	case sg == len(kinds):
		return ProtocolSGLang, nil
	}
	return "", fmt.Errorf("rollout: %d of %d engines are SGLang: the router sends every turn to any replica, and SGLang's native /generate and vLLM's /v1/completions differ; run SGLang engines in a run of their own", sg, len(kinds))
}

// sglangGenerateBody is the part of SGLang's GenerateReqInput
// (python/sglang/srt/managers/io_struct.py) the client sends.
// logprob_start_len -1 asks for the generated tokens' logprobs only.
type sglangGenerateBody struct {
	InputIDs        []int32        `json:"input_ids"`
	SamplingParams  map[string]any `json:"sampling_params"`
	ReturnLogprob   bool           `json:"return_logprob"`
	LogprobStartLen int            `json:"logprob_start_len"`
}

// sglangAnswer is the part of /generate's answer the client reads
// (tokenizer_manager's out dict: text, output_ids, meta_info).
type sglangAnswer struct {
	OutputIDs []int32 `json:"output_ids"`
	MetaInfo  struct {
		FinishReason *struct {
			Type string `json:"type"`
		} `json:"finish_reason"`
		PromptTokens *int `json:"prompt_tokens"`
		// [logprob, token_id, text-or-null] per generated token.
		OutputTokenLogprobs [][]json.RawMessage `json:"output_token_logprobs"`
	} `json:"meta_info"`
}

// generateSGLang is Generate over SGLang's native /generate.
func (c *HTTPClient) generateSGLang(ctx context.Context, req TurnRequest) (TurnOutput, error) {
	if req.Routes.On() {
		return TurnOutput{}, fmt.Errorf("%w: routed experts over SGLang are not supported by asyncrl's SGLang rollout path (run R3 on vLLM engines)", ErrEngine)
	}
	if c.SupportFromLogprobs > 0 {
		return TurnOutput{}, fmt.Errorf("%w: support_from_logprobs reads vLLM's processed logprobs; SGLang's /generate has no equivalent (set rollout.support_from_logprobs: 0)", ErrEngine)
	}
	sp := map[string]any{"max_new_tokens": req.MaxTokens, "temperature": req.Temperature}
	if req.TopP > 0 {
		sp["top_p"] = req.TopP
	}
	if req.TopK > 0 {
		sp["top_k"] = req.TopK // SGLang's off is -1, its default
	}
	if len(c.Stop) > 0 {
		sp["stop"] = c.Stop
	}
	if len(c.StopTokenIDs) > 0 {
		sp["stop_token_ids"] = c.StopTokenIDs
	}
	body, err := json.Marshal(sglangGenerateBody{InputIDs: req.Tokens, SamplingParams: sp, ReturnLogprob: true, LogprobStartLen: -1})
	if err != nil {
		return TurnOutput{}, err
	}
	data, resp, err := c.post(ctx, "/generate", body, req.SessionID)
	if err != nil {
		return TurnOutput{}, err
	}
	out, err := decodeSGLangAnswer(data, resp.Header, req.Tokens)
	if err != nil {
		return TurnOutput{}, fmt.Errorf("%w: %s: %w", ErrEngine, resp.Request.URL, err)
	}
	out.Engine = resp.Header.Get("X-Asyncrl-Replica")
	return out, nil
}

// decodeSGLangAnswer turns a /generate body (and the router's headers)
// into a TurnOutput: tokens from output_ids, each token's logprob from
// meta_info.output_token_logprobs (whose token ids must match), the finish
// reason's type (stop, length, abort), versions from the router's header
// (SGLang reports none per token), and a check that the engine saw the
// whole prompt (meta_info.prompt_tokens).
func decodeSGLangAnswer(data []byte, h http.Header, prompt []int32) (TurnOutput, error) {
	var a sglangAnswer
	if err := json.Unmarshal(data, &a); err != nil {
		return TurnOutput{}, fmt.Errorf("decode response: %w", err)
	}
	if a.OutputIDs == nil {
		return TurnOutput{}, errors.New("no output_ids in SGLang's /generate answer")
	}
	n := len(a.OutputIDs)
	if p := a.MetaInfo.PromptTokens; p != nil && *p != len(prompt) {
		return TurnOutput{}, fmt.Errorf("meta_info.prompt_tokens is %d for the %d prompt tokens sent", *p, len(prompt))
	}
	if len(a.MetaInfo.OutputTokenLogprobs) != n {
		return TurnOutput{}, fmt.Errorf("%d output_ids but %d meta_info.output_token_logprobs", n, len(a.MetaInfo.OutputTokenLogprobs))
	}
	out := TurnOutput{Tokens: a.OutputIDs, Logprobs: make([]float32, n)}
	for i, t := range a.MetaInfo.OutputTokenLogprobs {
		var lp *float64
		var id int32
		if len(t) < 2 || json.Unmarshal(t[0], &lp) != nil || lp == nil || json.Unmarshal(t[1], &id) != nil {
			return TurnOutput{}, fmt.Errorf("meta_info.output_token_logprobs[%d] is not [logprob, token_id, …]", i)
		}
		if id != a.OutputIDs[i] {
			return TurnOutput{}, fmt.Errorf("meta_info.output_token_logprobs[%d] is for token %d, output_ids[%d] is %d", i, id, i, a.OutputIDs[i])
		}
		out.Logprobs[i] = float32(*lp)
	}
	if a.MetaInfo.FinishReason != nil {
		out.Finish = a.MetaInfo.FinishReason.Type
	}
	var err error
	if out.Versions, err = answerVersions(completionChoice{}, h, n); err != nil {
		return TurnOutput{}, err
	}
	if out.Versions == nil {
		out.Versions = []int64{}
	}
	return out, nil
}
