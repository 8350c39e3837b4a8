package engine

import (
	"encoding/json"

	"github.com/asyncrl/asyncrl/messages/vllmwire"
)

// Wire types of the vLLM-compatible API. Field names and shapes follow
// vLLM's OpenAI server; the asyncrl extensions are marked.

// SamplingOptions are the body fields that /v1/completions and
// /v1/chat/completions share, with the same meaning in both. Both request
// types embed it, so its fields stay top-level JSON keys and one parser
// reads them for either endpoint.
type SamplingOptions struct {
	MaxTokens     *int            `json:"max_tokens"`
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	TopK          *int            `json:"top_k"`
	MinP          *float64        `json:"min_p"`
	Seed          *int64          `json:"seed"`
	N             *int            `json:"n"`
	Stop          json.RawMessage `json:"stop"`
	Stream        bool            `json:"stream"`
	StreamOptions *StreamOptions  `json:"stream_options"`
	// IgnoreEOS and ReturnTokenIDs are vLLM extensions.
	IgnoreEOS      bool `json:"ignore_eos"`
	ReturnTokenIDs bool `json:"return_token_ids"`
	// ReturnTokensAsTokenIDs names logprob tokens "token_id:N" (vLLM
	// extension; for token-in/token-out clients).
	ReturnTokensAsTokenIDs bool `json:"return_tokens_as_token_ids"`
	// RequestID names the request for /abort_requests (vLLM extension;
	// the X-Request-Id header does the same).
	RequestID string `json:"request_id"`
	// ReturnRoutedExperts asks for each choice's routed_experts (R3): the
	// served model must implement RoutesModel. vLLM returns them whenever
	// the server runs with --enable-return-routed-experts; SGLang has this
	// per-request flag.
	ReturnRoutedExperts bool `json:"return_routed_experts"`
	// RoutedExpertsPromptStart skips the routes of the first N prompt
	// tokens (vLLM's routed_experts_prompt_start: the rows a multi-turn
	// client already holds); it must be below the prompt's length.
	RoutedExpertsPromptStart int `json:"routed_experts_prompt_start"`
}

// CompletionRequest is the body of POST /v1/completions.
type CompletionRequest struct {
	Model string `json:"model"`
	// Prompt is a string, a list of strings, a list of token ids or a
	// list of lists of token ids.
	Prompt json.RawMessage `json:"prompt"`
	SamplingOptions
	// Logprobs is the legacy count of alternatives per token.
	Logprobs *int `json:"logprobs"`
}

// StreamOptions is the OpenAI stream_options object.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// ChatMessage is one chat turn. Content is a string or a list of
// {"type":"text","text":...} parts.
type ChatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	// raw is the message as sent (tool_calls, tool_call_id, name,
	// reasoning_content, …), which a chat template reads (chathf.go).
	raw json.RawMessage
}

// ChatRequest is the body of POST /v1/chat/completions.
type ChatRequest struct {
	Model    string        `json:"model"`
	Messages []ChatMessage `json:"messages"`
	SamplingOptions
	// MaxCompletionTokens, when set, overrides MaxTokens.
	MaxCompletionTokens *int `json:"max_completion_tokens"`
	Logprobs            bool `json:"logprobs"`
	TopLogprobs         *int `json:"top_logprobs"`
	// Tools, AddGenerationPrompt (default true) and ChatTemplateKwargs are
	// vLLM's chat-template fields; they apply when the engine has a
	// tokenizer with a chat template (WithTokenizer).
	Tools               json.RawMessage            `json:"tools,omitempty"`
	AddGenerationPrompt *bool                      `json:"add_generation_prompt,omitempty"`
	ChatTemplateKwargs  map[string]json.RawMessage `json:"chat_template_kwargs,omitempty"`
}

// Extensions are the asyncrl fields on every choice (and on every streamed
// chunk's choice, for the tokens of that chunk).
type Extensions struct {
	// WeightVersion is the version that produced the choice's last token
	// (the serving version when it has none yet).
	WeightVersion int64 `json:"weight_version"`
	// TokenWeightVersions holds one version per generated token; a
	// keep-mode pause with a weight update makes it change mid-request.
	TokenWeightVersions []int64 `json:"token_weight_versions"`
	// OutputLogprobs holds log_softmax(logits/T)[token] of every generated
	// token under the weights that produced it (T = 1 for greedy),
	// whether or not `logprobs` was asked for.
	OutputLogprobs []float32 `json:"output_logprobs"`
	// SampleSupport holds, per generated token, the candidate ids that
	// survived top-k/top-p/min-p (descending probability); present only
	// when one of those filters is active.
	SampleSupport [][]int32 `json:"sample_support,omitempty"`
	// OutputSupportLogprobs holds, per generated token, its logprob
	// renormalised over its SampleSupport row at the sampling temperature
	// (sampler.SupportLogProb on the logits that sampled it): what a trainer
	// with normalize_over_support compares its own support-normalised
	// logprob against. Present exactly when SampleSupport is.
	OutputSupportLogprobs []float32 `json:"output_support_logprobs,omitempty"`
}

// CompletionLogprobs is the legacy completions logprobs object.
type CompletionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float32            `json:"token_logprobs"`
	TopLogprobs   []map[string]float32 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// CompletionChoice is one choice of a completion (or a streamed chunk).
type CompletionChoice struct {
	Index        int                 `json:"index"`
	Text         string              `json:"text"`
	Logprobs     *CompletionLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
	// PromptTokenIDs and TokenIDs are present with return_token_ids
	// (prompt ids only on the first chunk of a stream).
	PromptTokenIDs []int32 `json:"prompt_token_ids,omitempty"`
	TokenIDs       []int32 `json:"token_ids,omitempty"`
	// RoutedExperts, with return_routed_experts, is vLLM's base64 .npy of
	// the routes of positions [routed_experts_prompt_start, prompt +
	// generated − 1) (messages/vllmwire); null when nothing was generated.
	// Non-streamed answers only, as in vLLM.
	RoutedExperts *vllmwire.RoutedExperts `json:"routed_experts,omitempty"`
	Extensions
}

// PromptTokensDetails reports prefix-cache reuse.
type PromptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// Usage counts tokens of a whole request.
type Usage struct {
	PromptTokens        int                  `json:"prompt_tokens"`
	CompletionTokens    int                  `json:"completion_tokens"`
	TotalTokens         int                  `json:"total_tokens"`
	PromptTokensDetails *PromptTokensDetails `json:"prompt_tokens_details"`
}

// CompletionResponse is the body (or, with object "text_completion", each
// streamed chunk) of /v1/completions.
type CompletionResponse struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []CompletionChoice `json:"choices"`
	Usage   *Usage             `json:"usage,omitempty"`
}

// ChatTopLogprob is one alternative in chat logprobs.
type ChatTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float32 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// ChatTokenLogprob is one generated token in chat logprobs.
type ChatTokenLogprob struct {
	Token       string           `json:"token"`
	Logprob     float32          `json:"logprob"`
	Bytes       []int            `json:"bytes"`
	TopLogprobs []ChatTopLogprob `json:"top_logprobs"`
}

// ChatLogprobs is the chat logprobs object.
type ChatLogprobs struct {
	Content []ChatTokenLogprob `json:"content"`
}

// ChatResponseMessage is the assistant message (or stream delta).
type ChatResponseMessage struct {
	Role    string `json:"role,omitempty"`
	Content string `json:"content"`
}

// ChatChoice is one chat choice; Message in responses, Delta in chunks.
type ChatChoice struct {
	Index          int                  `json:"index"`
	Message        *ChatResponseMessage `json:"message,omitempty"`
	Delta          *ChatResponseMessage `json:"delta,omitempty"`
	Logprobs       *ChatLogprobs        `json:"logprobs"`
	FinishReason   *string              `json:"finish_reason"`
	PromptTokenIDs []int32              `json:"prompt_token_ids,omitempty"`
	TokenIDs       []int32              `json:"token_ids,omitempty"`
	// RoutedExperts is CompletionChoice.RoutedExperts for a chat choice:
	// vLLM's ChatCompletionResponseChoice carries the same base64 .npy
	// (vllm/entrypoints/openai/chat_completion/protocol.py, filled in
	// serving.py's non-streamed chat_completion_full_generator), and its
	// ChatCompletionRequest takes routed_experts_prompt_start. Rows start
	// at the rendered chat prompt's first token.
	RoutedExperts *vllmwire.RoutedExperts `json:"routed_experts,omitempty"`
	Extensions
}

// ChatResponse is the body of /v1/chat/completions ("chat.completion") or
// one streamed chunk ("chat.completion.chunk").
type ChatResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []ChatChoice `json:"choices"`
	Usage   *Usage       `json:"usage,omitempty"`
}

// ErrorBody is vLLM's error envelope.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail describes one error; Code repeats the HTTP status.
type ErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

// UpdateWeightsRequest is the built-in engine's body for /update_weights.
type UpdateWeightsRequest struct {
	CheckpointDir string `json:"checkpoint_dir"`
	Version       int64  `json:"version"`
}

// LoRARequest is the body of /v1/load_lora_adapter and unload.
type LoRARequest struct {
	LoRAName string `json:"lora_name"`
	LoRAPath string `json:"lora_path"`
	// LoadInplace replaces an adapter already loaded under LoRAName
	// (without it, loading a loaded name is a 400, as in vLLM).
	LoadInplace bool `json:"load_inplace,omitempty"`
}

// AbortRequest is the body of /abort_requests; empty RequestIDs = all.
type AbortRequest struct {
	RequestIDs []string `json:"request_ids"`
}
