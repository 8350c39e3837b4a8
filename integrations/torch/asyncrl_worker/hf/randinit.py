"""Random-initialised checkpoints in HF layout for tests and benchmarks
(asyncrl model init is the Go side's; this writer lets the torch side test
and measure without it).

Tiny presets per architecture: the shapes and settings of `asyncrl model
init --preset tiny` (model-go's model/transformer/init.go NewPreset), so
the torch benchmarks and the Go engine's measure the same models: hidden
64, 2 layers (deepseek_v3: 3, the first dense), 4 heads, 2 KV heads,
head_dim 16, FFN 128, max_position_embeddings 4096; qwen3 ties its
embeddings, rope_theta 1e6; qwen3_moe 8 experts top-2 (FFN 32),
norm_topk_prob; llama rope_theta 500000 with llama3 scaling (factor 8,
1 / 4, original 8192); deepseek_v3 MLA (q 32 / kv 32, nope 16, rope 8,
v 16), yarn (factor 4 over 1024, mscale and mscale_all_dim 1), 8 experts
in 2 groups (topk_group 1) top-2, a shared expert, routed_scaling_factor
2.5, rope_interleave.
"""

from __future__ import annotations

import os
from collections import OrderedDict

import torch

from .. import safetensors as st
from .checkpoint import write_json
from .config import ARCHITECTURES, parse_config
from .model import tensor_specs

_COMMON = {"hidden_act": "silu", "rms_norm_eps": 1e-6, "max_position_embeddings": 4096, "initializer_range": 0.02,
           "bos_token_id": 1, "eos_token_id": 2, "attention_dropout": 0.0, "use_cache": True}

TINY = {
    "qwen3": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 16, "rope_theta": 1000000.0, "rope_scaling": None,
              "tie_word_embeddings": True, "attention_bias": False, "use_sliding_window": False},
    "qwen3_moe": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                  "num_key_value_heads": 2, "head_dim": 16, "rope_theta": 1000000.0, "rope_scaling": None,
                  "tie_word_embeddings": False, "attention_bias": False, "num_experts": 8,
                  "num_experts_per_tok": 2, "moe_intermediate_size": 32, "norm_topk_prob": True,
                  "decoder_sparse_step": 1, "mlp_only_layers": []},
    "llama": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 16, "rope_theta": 500000.0, "tie_word_embeddings": False,
              "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
              "attention_bias": False, "mlp_bias": False},
    "deepseek_v3": {"hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32,
                    "num_hidden_layers": 3, "first_k_dense_replace": 1, "num_attention_heads": 4,
                    "num_key_value_heads": 4, "q_lora_rank": 32, "kv_lora_rank": 32, "qk_nope_head_dim": 16,
                    "qk_rope_head_dim": 8, "v_head_dim": 16, "n_routed_experts": 8, "n_group": 2,
                    "topk_group": 1, "num_experts_per_tok": 2, "n_shared_experts": 1,
                    "routed_scaling_factor": 2.5, "norm_topk_prob": True, "scoring_func": "sigmoid",
                    "topk_method": "noaux_tc", "rope_theta": 10000.0, "rope_interleave": True,
                    "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024,
                                     "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
                    "tie_word_embeddings": False, "attention_bias": False},
}


def tiny_config(arch: str, vocab_size: int = 256, **override) -> dict:
    """config.json content of arch's tiny preset (HF field names)."""
    if arch not in TINY:
        raise ValueError(f"unknown architecture {arch!r} (one of {', '.join(TINY)})")
    cfg = {"architectures": [ARCHITECTURES[arch]], "model_type": arch, "vocab_size": vocab_size,
           **_COMMON, **TINY[arch], "torch_dtype": "bfloat16"}
    cfg.update(override)
    return cfg


def random_tensors(raw: dict, seed: int, std: float = 0.02, norm_jitter: float = 0.0,
                   bias_std: float = 0.0) -> "OrderedDict[str, torch.Tensor]":
    """Tensors for config raw: weights N(0, std) (HF _init_weights with
    initializer_range), norms 1 (+ U(-jitter, jitter), so tests see a norm
    that is ignored), the router correction bias N(0, bias_std) (0 as HF)."""
    cfg = parse_config(raw)
    g = torch.Generator().manual_seed(seed)
    out: "OrderedDict[str, torch.Tensor]" = OrderedDict()
    for name, shape, trainable in tensor_specs(cfg):
        if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
            t = torch.ones(shape) + (torch.rand(shape, generator=g) * 2 - 1) * norm_jitter
        elif not trainable:
            t = torch.randn(shape, generator=g) * bias_std
        else:
            t = torch.randn(shape, generator=g) * std
        out[name] = t
    return out


def write_checkpoint(d: str, raw: dict, tensors: dict, dtype: str = "BF16", max_shard_size: int | None = None,
                     side_files: dict | None = None, bias_dtype: str = "F32") -> None:
    """Write an HF checkpoint directory as transformers' save_pretrained
    does: config.json (sorted keys, indent 2), model.safetensors in dtype or
    shards + index under max_shard_size, generation_config.json (bos/eos)
    and side_files {name: text} (e.g. a tokenizer.json)."""
    os.makedirs(d, exist_ok=True)
    cfg = parse_config(raw)
    kinds = {n: (dtype if tr else bias_dtype) for n, _, tr in tensor_specs(cfg)}
    st.save_sharded(d, OrderedDict((n, tensors[n]) for n in kinds), kinds, {"format": "pt"},
                    max_shard_size or st.HF_MAX_SHARD_SIZE)
    write_json(os.path.join(d, "config.json"), dict(raw, torch_dtype={"BF16": "bfloat16", "F32": "float32"}[dtype]))
    write_json(os.path.join(d, "generation_config.json"),
               {k: raw[k] for k in ("bos_token_id", "eos_token_id") if raw.get(k) is not None})
    for name, text in (side_files or {}).items():
        with open(os.path.join(d, name), "w") as f:
            f.write(text)


def make_checkpoint(d: str, arch: str, vocab_size: int = 256, seed: int = 0, dtype: str = "BF16",
                    max_shard_size: int | None = None, std: float = 0.02, norm_jitter: float = 0.0,
                    bias_std: float = 0.0, side_files: dict | None = None, **override) -> dict:
    """tiny_config + random_tensors + write_checkpoint; returns the config."""
    raw = tiny_config(arch, vocab_size, **override)
    write_checkpoint(d, raw, random_tensors(raw, seed, std, norm_jitter, bias_std), dtype, max_shard_size, side_files)
    return raw
