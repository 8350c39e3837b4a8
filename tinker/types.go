package tinker

import "encoding/json"

// Wire types: the JSON bodies the tinker SDK (thinking-machines-lab/tinker
// ≤ v0.24.1, src/tinker/types/*.py) sends and reads, as SkyRL's server
// (NovaSky-AI/SkyRL skyrl/tinker/api.py, types.py) accepts them. Unknown
// keys are ignored, as pydantic's defaults do on both sides: every SDK
// request carries a "type" literal and newer SDKs add fields.

// TensorData is types/tensor_data.py's JSON form: flat data, a dtype
// ("int64" or "float32") and an optional shape.
type TensorData struct {
	Data  []float64 `json:"data"`
	DType string    `json:"dtype"`
	Shape []int     `json:"shape,omitempty"`
}

// Chunk is one piece of a ModelInput: "encoded_text" tokens (supported) or
// an "image"/"image_asset_pointer" (not supported: 422).
type Chunk struct {
	Type   string  `json:"type"`
	Tokens []int32 `json:"tokens,omitempty"`
}

// ModelInput is types/model_input.py: a list of chunks.
type ModelInput struct {
	Chunks []Chunk `json:"chunks"`
}

// Datum is types/datum.py: the model input and the loss function's inputs
// (target_tokens, weights, logprobs, advantages, …) by name.
type Datum struct {
	ModelInput   ModelInput            `json:"model_input"`
	LossFnInputs map[string]TensorData `json:"loss_fn_inputs"`
}

// ForwardBackwardInput is types/forward_backward_input.py.
type ForwardBackwardInput struct {
	Data         []Datum            `json:"data"`
	LossFn       string             `json:"loss_fn"`
	LossFnConfig map[string]float64 `json:"loss_fn_config,omitempty"`
}

// CreateSessionRequest is types/create_session_request.py.
type CreateSessionRequest struct {
	Tags         []string       `json:"tags"`
	UserMetadata map[string]any `json:"user_metadata"`
	SDKVersion   string         `json:"sdk_version"`
	ProjectID    string         `json:"project_id,omitempty"`
}

// CreateSessionResponse is types/create_session_response.py.
type CreateSessionResponse struct {
	Type        string  `json:"type"`
	SessionID   string  `json:"session_id"`
	InfoMessage *string `json:"info_message"`
}

// SessionRequest carries only a session id (session_heartbeat).
type SessionRequest struct {
	SessionID string `json:"session_id"`
}

// LoraConfig is types/lora_config.py.
type LoraConfig struct {
	Rank         int    `json:"rank"`
	Seed         *int64 `json:"seed,omitempty"`
	TrainUnembed *bool  `json:"train_unembed,omitempty"`
	TrainMLP     *bool  `json:"train_mlp,omitempty"`
	TrainAttn    *bool  `json:"train_attn,omitempty"`
}

// CreateModelRequest is types/create_model_request.py.
type CreateModelRequest struct {
	SessionID    string         `json:"session_id"`
	ModelSeqID   *int64         `json:"model_seq_id"`
	BaseModel    string         `json:"base_model"`
	LoraConfig   *LoraConfig    `json:"lora_config"`
	UserMetadata map[string]any `json:"user_metadata,omitempty"`
}

// ModelRequest carries only a model id (get_info, unload_model).
type ModelRequest struct {
	ModelID string `json:"model_id"`
}

// ModelData is get_info's model_data.
type ModelData struct {
	Arch        string `json:"arch"`
	ModelName   string `json:"model_name"`
	TokenizerID string `json:"tokenizer_id"`
}

// GetInfoResponse is types/get_info_response.py.
type GetInfoResponse struct {
	Type      string    `json:"type"`
	ModelID   string    `json:"model_id"`
	ModelData ModelData `json:"model_data"`
	IsLoRA    bool      `json:"is_lora"`
	LoRARank  int       `json:"lora_rank"`
	ModelName string    `json:"model_name"`
}

// ForwardBackwardRequest is types/forward_backward_request.py (JSON form).
type ForwardBackwardRequest struct {
	ModelID              string                `json:"model_id"`
	SeqID                *int64                `json:"seq_id"`
	ForwardBackwardInput *ForwardBackwardInput `json:"forward_backward_input"`
}

// ForwardRequest is types/forward_request.py (≤ 0.24).
type ForwardRequest struct {
	ModelID      string                `json:"model_id"`
	SeqID        *int64                `json:"seq_id"`
	ForwardInput *ForwardBackwardInput `json:"forward_input"`
}

// AdamParams is types/optim_step_request.py's adam_params with the SDK's
// defaults.
type AdamParams struct {
	LearningRate float64 `json:"learning_rate"`
	Beta1        float64 `json:"beta1"`
	Beta2        float64 `json:"beta2"`
	Eps          float64 `json:"eps"`
	WeightDecay  float64 `json:"weight_decay"`
	GradClipNorm float64 `json:"grad_clip_norm"`
}

// DefaultAdamParams are the SDK's defaults (types/optim_step_request.py).
func DefaultAdamParams() AdamParams {
	return AdamParams{LearningRate: 1e-4, Beta1: 0.9, Beta2: 0.95, Eps: 1e-12}
}

// OptimStepRequest is types/optim_step_request.py.
type OptimStepRequest struct {
	ModelID    string      `json:"model_id"`
	SeqID      *int64      `json:"seq_id"`
	AdamParams *AdamParams `json:"adam_params"`
}

// SaveWeightsRequest is types/save_weights_request.py.
type SaveWeightsRequest struct {
	ModelID    string `json:"model_id"`
	Path       string `json:"path"`
	SeqID      *int64 `json:"seq_id"`
	TTLSeconds *int64 `json:"ttl_seconds,omitempty"`
	Overwrite  bool   `json:"overwrite"`
}

// SaveWeightsForSamplerRequest is types/save_weights_for_sampler_request.py.
type SaveWeightsForSamplerRequest struct {
	ModelID              string  `json:"model_id"`
	SeqID                *int64  `json:"seq_id"`
	Path                 *string `json:"path,omitempty"`
	SamplingSessionSeqID *int64  `json:"sampling_session_seq_id,omitempty"`
	TTLSeconds           *int64  `json:"ttl_seconds,omitempty"`
}

// LoadWeightsRequest is types/load_weights_request.py. SessionID,
// ModelSeqID and BaseModel are its create-via-load addressing (0.24.1+),
// which the SDK uses only when client/config says
// create_model_via_load_weights; this server says false, so they are
// read only to refuse them clearly.
type LoadWeightsRequest struct {
	ModelID            string  `json:"model_id"`
	SeqID              *int64  `json:"seq_id"`
	Path               string  `json:"path"`
	Optimizer          bool    `json:"optimizer"`
	SessionID          *string `json:"session_id,omitempty"`
	ModelSeqID         *int64  `json:"model_seq_id,omitempty"`
	BaseModel          *string `json:"base_model,omitempty"`
	WeightsAccessToken *string `json:"weights_access_token,omitempty"`
}

// WeightsInfoRequest is what RestClient.get_weights_info_by_tinker_path
// posts to weights_info (src/tinker/lib/public_interfaces/rest_client.py,
// thinking-machines-lab/tinker 6b025363 = 0.24.1 and d595dc2b = 0.25.0).
type WeightsInfoRequest struct {
	TinkerPath string `json:"tinker_path"`
}

// WeightsInfoResponse is types/weights_info_response.py (same commits):
// ServiceClient.create_training_client_from_state(_with_optimizer) creates
// the model from base_model and lora_rank (the async variant asserts
// is_lora and a rank) and the train_* flags (None reads as true).
type WeightsInfoResponse struct {
	BaseModel    string `json:"base_model"`
	IsLoRA       bool   `json:"is_lora"`
	LoRARank     *int   `json:"lora_rank"`
	TrainUnembed *bool  `json:"train_unembed,omitempty"`
	TrainMLP     *bool  `json:"train_mlp,omitempty"`
	TrainAttn    *bool  `json:"train_attn,omitempty"`
}

// ClientConfigResponse is the part of types/client_config_response.py
// (same commits; unknown flags are ignored by the SDK) this server sets.
type ClientConfigResponse struct {
	PJWTAuthEnabled bool `json:"pjwt_auth_enabled"`
	// ParallelFwdBwdChunks false makes the SDK submit a batch's chunks one
	// after another in seq_id order (training_client.py _run_fwd_bwd):
	// the server then sees a batch's chunks in order and can name a bad
	// datum by its index in the whole batch.
	ParallelFwdBwdChunks bool `json:"parallel_fwdbwd_chunks"`
	// CreateModelViaLoadWeights false keeps create_training_client_from_state
	// on weights_info → create_model → load_weights.
	CreateModelViaLoadWeights bool `json:"create_model_via_load_weights"`
}

// ClientDynamicConfigResponse is types/client_dynamic_config_response.py
// (new in 0.25.0, d595dc2b): re-fetched every refresh_interval_sec.
type ClientDynamicConfigResponse struct {
	RefreshIntervalSec int `json:"refresh_interval_sec"`
}

// CreateSamplingSessionRequest is types/create_sampling_session_request.py.
type CreateSamplingSessionRequest struct {
	SessionID            string  `json:"session_id"`
	SamplingSessionSeqID *int64  `json:"sampling_session_seq_id"`
	ModelPath            *string `json:"model_path,omitempty"`
	BaseModel            *string `json:"base_model,omitempty"`
}

// SamplingParams is types/sampling_params.py.
type SamplingParams struct {
	MaxTokens   *int            `json:"max_tokens"`
	Seed        *int64          `json:"seed,omitempty"`
	Stop        json.RawMessage `json:"stop,omitempty"`
	Temperature *float64        `json:"temperature,omitempty"`
	TopK        *int            `json:"top_k,omitempty"`
	TopP        *float64        `json:"top_p,omitempty"`
}

// SampleRequest is types/sample_request.py.
type SampleRequest struct {
	SamplingSessionID  *string         `json:"sampling_session_id,omitempty"`
	SeqID              *int64          `json:"seq_id,omitempty"`
	ModelPath          *string         `json:"model_path,omitempty"`
	BaseModel          *string         `json:"base_model,omitempty"`
	NumSamples         *int            `json:"num_samples,omitempty"`
	Prompt             *ModelInput     `json:"prompt"`
	SamplingParams     *SamplingParams `json:"sampling_params"`
	PromptLogprobs     *bool           `json:"prompt_logprobs,omitempty"`
	TopkPromptLogprobs int             `json:"topk_prompt_logprobs,omitempty"`
}

// SampledSequence is types/sampled_sequence.py.
type SampledSequence struct {
	StopReason string    `json:"stop_reason"`
	Tokens     []int32   `json:"tokens"`
	Logprobs   []float32 `json:"logprobs"`
}

// SampleResponse is types/sample_response.py.
type SampleResponse struct {
	Type      string            `json:"type"`
	Sequences []SampledSequence `json:"sequences"`
}

// RetrieveFutureRequest is types/future_retrieve_request.py.
type RetrieveFutureRequest struct {
	RequestID         string `json:"request_id"`
	AllowMetadataOnly bool   `json:"allow_metadata_only"`
}

// UntypedAPIFuture is what every future route answers
// (types/shared/untyped_api_future.py).
type UntypedAPIFuture struct {
	RequestID string `json:"request_id"`
	ModelID   string `json:"model_id,omitempty"`
}

// TryAgainResponse is types/try_again_response.py.
type TryAgainResponse struct {
	Type       string `json:"type"`
	RequestID  string `json:"request_id"`
	QueueState string `json:"queue_state"`
}

// RequestFailedResponse is types/request_failed_response.py: a future that
// failed, with a category "unknown", "server" or "user".
type RequestFailedResponse struct {
	Error    string `json:"error"`
	Category string `json:"category"`
}

// LossFnOutput is one datum's outputs of a forward or forward_backward.
type LossFnOutput map[string]TensorData

// ForwardBackwardOutput is types/forward_backward_output.py.
type ForwardBackwardOutput struct {
	LossFnOutputType string             `json:"loss_fn_output_type"`
	LossFnOutputs    []LossFnOutput     `json:"loss_fn_outputs"`
	Metrics          map[string]float64 `json:"metrics"`
}

// OptimStepResponse is types/optim_step_response.py.
type OptimStepResponse struct {
	Metrics map[string]float64 `json:"metrics,omitempty"`
}
