// Package transformer implements, in pure Go on the CPU, the Hugging Face
// decoder architectures asyncrl serves in its built-in engine: qwen3,
// qwen3_moe, llama (Llama-3's settings) and deepseek_v3 (the architecture
// Kimi K2 uses). It reads and writes checkpoint directories exactly as
// Hugging Face writes them, and its *Model is an engine.Model,
// engine.RoutesModel, engine.BatchModel and engine.EOSModel.
//
// # Contract
//
//   - ParseConfig/ReadConfig read config.json with the semantics of
//     transformers' configuration_<arch>.py: absent or null fields take the
//     class defaults, unknown fields are ignored, a known field of the
//     wrong type or a value this package does not implement (another
//     hidden_act, sliding windows, dynamic/longrope rope, moe_layer_freq ≠
//     1, a softmax DeepSeek router, an unknown quant_method) is refused with
//     an error naming config.json and the field. An unknown model_type is
//     refused listing the supported ones.
//   - Load(dir) reads config.json, generation_config.json (optional) and
//     model.safetensors or the shards of model.safetensors.index.json. Every
//     tensor the config implies must be present with its shape and a float
//     dtype (F32/BF16/F16, widened to float32 once at load — see "Compute"),
//     or, in a checkpoint whose config.json has quantization_config,
//     F8_E4M3 codes with weight_scale_inv (block-wise FP8) or weight_scale
//     (MXFP8), dequantised with weights/quant exactly as vLLM serves them.
//     Tensors the config does not imply are refused (except
//     rotary_emb.inv_freq buffers, a tied model's lm_head.weight and
//     DeepSeek's next-token-prediction layers ≥ num_hidden_layers, which
//     transformers also skips). Errors wrap ErrConfig or ErrCheckpoint and
//     name the file and the tensor; nothing is returned half-loaded.
//   - Init(cfg, gen, seed) is deterministic (each tensor draws from its
//     own PCG stream of the seed) and follows transformers' _init_weights;
//     Save(dir, maxShardBytes) writes config.json as save_pretrained does
//     for the architecture, BF16 model.safetensors (or shards + index) and
//     generation_config.json. NewPreset gives the tiny and small configs
//     of `asyncrl model init`. Save→Load is bit-exact.
//   - A Model is immutable; NextLogits and Routes (stateless: a prefill
//     from scratch) are safe for concurrent use. Forward appends tokens to
//     per-sequence caches (Seq) and must not run concurrently on the same
//     caches; a refused Forward changes no cache.
//   - Quantized(q) is the model an engine serving engines.quantize q
//     computes with (int4_g32/int4_g128 via weights/quant.FakeQuantINT4,
//     fp8/mxfp8 via weights/quant's schemes) over the tensors Quantizable
//     accepts: every Linear weight of attention, dense MLP, experts and
//     shared experts — never embeddings, lm_head, norms, router gates,
//     e_score_correction_bias or biases.
//   - Inspect(dir) reports architecture, parameters, tensors, quantisation
//     and what asyncrl can do with the checkpoint, from headers only.
//   - ReadAdapter(dir) reads a LoRA adapter in PEFT's layout (see "LoRA
//     adapters"); Adapter.Apply(base) (LoadAdapter: both) returns base with
//     the adapted projections merged, sharing every other parameter with
//     base, which is not modified. Errors wrap ErrAdapter and name the file
//     and the field or tensor; nothing is returned half-applied.
//
// # Architecture facts (each from transformers' modeling files)
//
// qwen3 (modeling_qwen3.py @000c33fd): RMSNorm (float32 variance, x ·
// rsqrt(mean x² + eps) · weight); attention q/k/v/o (bias when
// attention_bias) with q_norm and k_norm — RMSNorm over head_dim of each
// head, before RoPE; GQA with num_key_value_heads; scale head_dim^−½;
// SwiGLU MLP down(silu(gate(x)) · up(x)); tie_word_embeddings makes
// lm_head the embedding. qwen3_moe (modeling_qwen3_moe.py @00d4b3d2): layer
// l is sparse unless l ∈ mlp_only_layers or (l+1) % decoder_sparse_step ≠ 0;
// router mlp.gate (no bias), softmax in float32, top-k, renormalised when
// norm_topk_prob; experts mlp.experts.E.{gate,up,down}_proj. llama
// (modeling_llama.py, configuration_llama.py @008e5743): GQA, no q/k-norm,
// attention_bias and mlp_bias, head_dim default hidden/heads; Llama-3.1's
// "llama3" rope scaling (modeling_rope_utils.py @ef468064
// _compute_llama3_parameters). deepseek_v3 (modeling_deepseek_v3.py
// @00b676f8, configuration_deepseek_v3.py @001f85b3): multi-head latent
// attention — q = q_b_proj(q_a_layernorm(q_a_proj(x))) (q_proj when
// q_lora_rank is null), split per head into qk_nope and qk_rope parts;
// kv_a_proj_with_mqa(x) = [compressed kv (kv_lora_rank) | shared rope key
// (qk_rope_head_dim)]; kv_b_proj(kv_a_layernorm(compressed)) = per head
// [k_nope | v]; keys cat(k_nope, rope(k_rope)), queries cat(q_nope,
// rope(q_rope)); scale qk_head_dim^−½ · yarn_get_mscale(factor,
// mscale_all_dim)² when rope_scaling has mscale_all_dim; with
// rope_interleave (default true) RoPE first de-interleaves the rope part
// (apply_rotary_pos_emb_interleave: element 2i → i, 2i+1 → i+d/2) and then
// rotates halves, i.e. it rotates the pairs (2i, 2i+1); layers < first_k_dense_replace are dense, the others
// MoE with DeepseekV3TopkRouter: scores = σ(x·Wᵀ) in float32, choice =
// scores + e_score_correction_bias (selection only), groups scored by the
// sum of their top-2 choices, topk_group groups kept (others' choices set
// to 0.0, masked_fill as transformers does), top-k of the choice; weights
// = scores (no bias), / (sum + 1e−20) when norm_topk_prob, ×
// routed_scaling_factor; plus shared_experts (an MLP of
// moe_intermediate_size · n_shared_experts) on the same input. Experts are
// summed in expert-id order, as transformers' loop with index_add_ does.
// Rotary embeddings (modeling_rope_utils.py): default, linear, llama3 and
// yarn (attention factor from attention_factor, else get_mscale(factor,
// mscale)/get_mscale(factor, mscale_all_dim), else get_mscale(factor);
// correction range at original_max_position_embeddings, floor/ceil);
// cos/sin = cos/sin(inv_freq · position) · attention factor, in float32;
// the tables are precomputed to 16384 positions.
//
// # Routes (R3) — the layout both sides use
//
// vLLM returns routed_experts as [positions, layers, top_k] where layers is
// hf_config.num_hidden_layers — every decoder layer, dense ones included:
// RoutedExpertsCapturer allocates its buffer (max tokens,
// num_hidden_layers, num_experts_per_tok), zeroed each step, and
// capture(layer_id, topk_ids) writes [:, layer_id, :]
// (vllm-project/vllm @00bd1493
// vllm/model_executor/layers/fused_moe/routed_experts_capturer.py); the
// model runner binds each FusedMoE's router to capture with
// module.layer_id (vllm/v1/worker/gpu_model_runner.py
// _bind_routed_experts_capturer), and FusedMoE.layer_id is
// extract_layer_index(layer_name) — the decoder layer's index in
// model.layers.N (vllm/model_executor/layers/fused_moe/layer.py). So row l
// of a position is decoder layer l; a dense layer's entries (DeepSeek's
// first first_k_dense_replace layers, Qwen3-MoE's mlp_only_layers) are 0.
// This package reports exactly that: RouteShape() = (num_hidden_layers,
// num_experts_per_tok, experts) for a model with any MoE layer, each row's
// ids in descending router score (ties to the lower id). A trainer replays
// row l on decoder layer l and ignores the rows of dense layers.
//
// # LoRA adapters
//
// An adapter directory is what PEFT's save_pretrained writes and vLLM's
// /v1/load_lora_adapter loads: adapter_config.json (r, lora_alpha,
// target_modules — vLLM's required fields, PEFTHelper in vllm-project/vllm
// @e745baff vllm/lora/peft_helper.py — and use_rslora) and
// adapter_model.safetensors with base_model.model.<module>.lora_A.weight
// [r, in] and .lora_B.weight [out, r] per adapted nn.Linear (huggingface/peft
// @00336949 src/peft/tuners/lora/layer.py, LoraLayer.update_layer). The
// adapted layer is W·x + s·B·A·x with s = lora_alpha/r, or lora_alpha/√r
// with use_rslora (the same file; vLLM's vllm_lora_scaling_factor). Apply
// merges W + s·B·A in float32 into a copy of each adapted projection.
// Modules are the projections of attention (q/k/v/o_proj; DeepSeek's
// q_proj or q_a_proj/q_b_proj, kv_a_proj_with_mqa, kv_b_proj) and of the
// MLPs (gate/up/down_proj of dense layers, of each expert —
// mlp.experts.E.*, the per-expert 2-D layout vLLM's FusedMoEWithLoRA packs
// (vllm/lora/lora_model.py @0306474e accepts experts.E.* modules) — and of
// DeepSeek's shared experts). Refused as vLLM refuses them: DoRA
// (use_dora, magnitude vectors) and modules_to_save
// (PEFTHelper._validate_features), LoRA biases (bias ≠ "none": vLLM needs
// --enable-lora-bias), tensors that are not lora_A/lora_B weights
// (vllm/lora/utils.py parse_fine_tuned_lora_name); and, because they would
// serve something else than PEFT trained or than this package computes:
// rank_pattern/alpha_pattern, embedding and lm_head LoRA, router gates,
// fused 3-D expert LoRA, a module the base model does not have, and A/B
// shapes that do not fit the module or r.
//
// # Compute
//
// Weights are widened to float32 once, at load: Go has no BF16 arithmetic,
// and widening per use would put a conversion on every multiply-add of the
// inner loops (the matmuls are the whole cost), for half the memory. Every
// activation is float32. Matmuls are W·x over rows (out[t,n] = x[t]·W[n]),
// tiled so a block of W stays in cache while every row passes over it, four
// rows at a time; columns are split across cores in fixed chunks.
// Attention runs per (row, head), split across cores. Every output element
// is one dot product with a fixed order of additions, so a row's result
// does not depend on the batch it is in, the chunk that computes it or the
// scheduling: a cached decode step is bit-identical to a stateless prefill
// of the same tokens, and 32 concurrent requests to the same requests one
// by one. Scratch memory lives in a pooled workspace; steady decoding
// allocates only when a cache crosses a power of two.
package transformer
