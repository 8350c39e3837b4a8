// Package quantdir quantises a Hugging Face serving checkpoint directory
// into another one: the linear projection weights vLLM quantises (FP8
// block-wise or MXFP8, package weights/quant) become their codes and
// scale tensors, every other tensor is copied unchanged, the shards keep
// their names (the index is rewritten), config.json gains the scheme's
// quantization_config, and every other file of the directory (generation
// config, tokenizer files) is copied. It is how a run publishes a
// Hugging Face model with publisher.quantize (docs/models.md); the
// built-in policy quantises from memory instead (model.SaveServingQuantized).
//
// Which tensors vLLM quantises (Quantizable): the weights of the layers it
// builds as LinearBase with the checkpoint's quantisation config — the
// attention, dense MLP, expert and shared-expert projections (q/k/v/o,
// gate/up/down, DeepSeek's q_a/q_b/kv_a_proj_with_mqa/kv_b) — and not the
// embedding or lm_head (VocabParallelEmbedding/ParallelLMHead, which
// Fp8Config leaves unquantised), the norms, nor an MoE's router gate,
// which vLLM builds with quant_config=None (vllm-project/vllm
// vllm/model_executor/models/qwen3_moe.py at
// 002456df36fc7a63ca4463f335a49d05634ab2ab, Qwen3MoeSparseMoeBlock.gate;
// the same in deepseek_v2.py's DeepseekV2MoE.gate), nor DeepSeek's
// e_score_correction_bias. DeepSeek-V3's own FP8 checkpoint quantises the
// same set (every *_proj.weight has a weight_scale_inv).
//
// The package is I/O over weights/safetensors and weights/quant; it never
// loads a model.
package quantdir
