"""config.json of the four native architectures, read with Hugging Face's
semantics (field names, defaults and the rules that derive the layer layout).

Sources (huggingface/transformers; every default below is the class
default there, used only when config.json leaves the field out):
  [Q3C]  src/transformers/models/qwen3/configuration_qwen3.py @008e574391258935f3ecc3035c882e73bbcac419
  [Q3M]  src/transformers/models/qwen3/modeling_qwen3.py @000c33fdfde12e1ffafbfcdb3c926df5727a00b6
  [QMC]  src/transformers/models/qwen3_moe/configuration_qwen3_moe.py @008e574391258935f3ecc3035c882e73bbcac419
  [QMM]  src/transformers/models/qwen3_moe/modeling_qwen3_moe.py @00d4b3d2142cb4ced2f51b90614b5d26bc045015
  [LC]   src/transformers/models/llama/configuration_llama.py @008e574391258935f3ecc3035c882e73bbcac419
  [DC]   src/transformers/models/deepseek_v3/configuration_deepseek_v3.py @001f85b38fb432858ace93f18622f07cec46d874
  [DM]   src/transformers/models/deepseek_v3/modular_deepseek_v3.py @000c33fdfde12e1ffafbfcdb3c926df5727a00b6
  [ROPE] src/transformers/modeling_rope_utils.py @ef46806472a64b0013ed413781e3afed82bfa047
  [VDS]  vllm-project/vllm vllm/model_executor/layers/rotary_embedding/deepseek_scaling_rope.py
         @7bc8d408139110c389bea6028e9fdfadb1eb7641 (the serving side of yarn + mscale)

Not supported (refused with the field named, never silently approximated):
attention_bias / mlp_bias true, sliding-window attention, an activation other
than silu, partial rotary factors, rope types other than default, linear,
llama3 and yarn.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field

# model_type -> the architectures entry HF writes for the causal LM
ARCHITECTURES = {
    "qwen3": "Qwen3ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "llama": "LlamaForCausalLM",
    "deepseek_v3": "DeepseekV3ForCausalLM",
}
CONFIG_FILE = "config.json"

# max_position_embeddings class defaults ([Q3C], [QMC], [LC], [DC])
_MAX_POS = {"qwen3": 32768, "qwen3_moe": 32768, "llama": 2048, "deepseek_v3": 4096}
# PreTrainedConfig's default rope_theta when config.json has none ([DC]:
# rope_parameters.setdefault("rope_theta", kwargs.pop("rope_theta", self.default_theta)))
DEFAULT_ROPE_THETA = 10000.0
ROPE_TYPES = ("default", "linear", "llama3", "yarn")


class ConfigError(ValueError):
    """A config.json the native models cannot run; the message names the
    file and the field."""


@dataclass(frozen=True)
class RopeConfig:
    """rope_parameters after HF's standardisation: type, theta and the
    scaling keys of the type."""

    rope_type: str = "default"
    theta: float = DEFAULT_ROPE_THETA
    params: dict = field(default_factory=dict)  # factor, low_freq_factor, beta_fast, mscale, ...


@dataclass(frozen=True)
class ArchConfig:
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int  # q/k/v head size of standard attention (MLA: qk_rope_head_dim, the rotary size)
    rms_norm_eps: float
    tie_word_embeddings: bool
    max_position_embeddings: int
    rope: RopeConfig
    pad_token_id: int | None = None
    bos_token_id: int | list | None = None
    eos_token_id: int | list | None = None
    qk_norm: bool = False  # qwen3 / qwen3_moe: RMSNorm of each q and k head before RoPE
    # mixture of experts (0 experts = dense)
    num_experts: int = 0
    top_k: int = 0
    moe_intermediate_size: int = 0
    norm_topk_prob: bool = False
    moe_layer_ids: tuple = ()
    router: str = ""  # "softmax" (qwen3_moe) | "sigmoid_grouped" (deepseek_v3)
    n_group: int = 1
    topk_group: int = 1
    routed_scaling_factor: float = 1.0
    n_shared_experts: int = 0
    # multi-head latent attention (deepseek_v3)
    mla: bool = False
    q_lora_rank: int | None = None
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    rope_interleave: bool = False
    raw: dict = field(default_factory=dict, compare=False, repr=False)  # config.json as read

    @property
    def architecture(self) -> str:
        return ARCHITECTURES[self.model_type]

    def is_moe_layer(self, layer: int) -> bool:
        return layer in self.moe_layer_ids

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def rotary_dim(self) -> int:
        # [DC]: head_dim = qk_rope_head_dim, which the rotary embedding reads
        return self.qk_rope_head_dim if self.mla else self.head_dim

    def softmax_scale(self) -> float:
        """The attention logits' scale. Standard attention: head_dim**-0.5
        ([Q3M] Qwen3Attention.scaling). MLA: qk_head_dim**-0.5, times
        yarn_get_mscale(factor, mscale_all_dim)**2 when rope scaling is on
        and mscale_all_dim is set ([DM] DeepseekV3Attention.__init__)."""
        if not self.mla:
            return self.head_dim ** -0.5
        s = self.qk_head_dim ** -0.5
        if self.rope.rope_type != "default":
            mad = self.rope.params.get("mscale_all_dim", 0) or 0
            if mad:
                m = yarn_get_mscale(self.rope.params["factor"], mad)
                s = s * m * m
        return s


def yarn_get_mscale(scale: float, mscale: float = 1.0) -> float:
    """[DM] / [VDS] yarn_get_mscale: 1 for scale <= 1, else 0.1*mscale*ln(scale) + 1."""
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def _where(path: str) -> str:
    return os.path.join(path, CONFIG_FILE) if path else CONFIG_FILE


def read_config(d: str) -> dict:
    """config.json of directory d as a dict (ConfigError naming the file)."""
    p = _where(d)
    try:
        with open(p) as f:
            raw = json.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{p}: missing (an HF checkpoint directory has config.json)") from None
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"{p}: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{p}: not a JSON object")
    return raw


def model_type_of(raw: dict) -> str | None:
    mt = raw.get("model_type")
    return mt if isinstance(mt, str) else None


class _Reader:
    def __init__(self, raw: dict, where: str):
        self.raw, self.where = raw, where

    def fail(self, key: str, msg: str):
        raise ConfigError(f"{self.where}: {key}: {msg}")

    def int(self, key: str, default=None, lo: int = 1, required: bool = False) -> int:
        v = self.raw.get(key, None)
        if v is None:
            if required or default is None:
                self.fail(key, "missing")
            return default
        if isinstance(v, bool) or not isinstance(v, int):
            self.fail(key, f"must be an integer, got {v!r}")
        if v < lo:
            self.fail(key, f"must be >= {lo}, got {v}")
        return v

    def float(self, key: str, default: float, pos: bool = True) -> float:
        v = self.raw.get(key, None)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or (pos and v <= 0):
            self.fail(key, f"must be a {'positive ' if pos else ''}finite number, got {v!r}")
        return float(v)

    def bool(self, key: str, default: bool) -> bool:
        v = self.raw.get(key, None)
        if v is None:
            return default
        if not isinstance(v, bool):
            self.fail(key, f"must be true or false, got {v!r}")
        return v

    def off(self, key: str):
        if self.raw.get(key):
            self.fail(key, f"{self.raw[key]!r} is not supported by the native {self.raw.get('model_type')} model (only false)")


def _rope(r: _Reader, max_pos: int) -> RopeConfig:
    """HF's rope standardisation ([DC] convert_rope_params_to_dict):
    rope_scaling (legacy, "type" accepted for "rope_type") or
    rope_parameters, with rope_theta taken from the top level when the dict
    has none, DEFAULT_ROPE_THETA otherwise."""
    raw = r.raw
    rp = raw.get("rope_parameters")
    key = "rope_parameters"
    if rp is None:
        rp, key = raw.get("rope_scaling"), "rope_scaling"
    if rp is None:
        rp = {}
    if not isinstance(rp, dict):
        r.fail(key, f"must be a map, got {rp!r}")
    rp = dict(rp)
    if "rope_type" not in rp and "type" in rp:
        rp["rope_type"] = rp.pop("type")
    rp.pop("type", None)
    typ = rp.pop("rope_type", "default")
    theta = rp.pop("rope_theta", raw.get("rope_theta", DEFAULT_ROPE_THETA))
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 1:
        r.fail("rope_theta", f"must be a number > 1, got {theta!r}")
    if typ not in ROPE_TYPES:
        r.fail(f"{key}.rope_type", f"{typ!r} is not supported (supported: {', '.join(ROPE_TYPES)})")
    if rp.get("partial_rotary_factor", 1.0) != 1.0 or raw.get("partial_rotary_factor", 1.0) != 1.0:
        r.fail("partial_rotary_factor", "only 1.0 is supported")
    rp.pop("partial_rotary_factor", None)
    for k, v in rp.items():
        if k == "truncate":
            if not isinstance(v, bool):
                r.fail(f"{key}.truncate", f"must be true or false, got {v!r}")
            continue
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)):
            r.fail(f"{key}.{k}", f"must be a finite number, got {v!r}")
    need = {"default": (), "linear": ("factor",), "yarn": ("factor",),
            "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")}[typ]
    for k in need:
        if rp.get(k) is None:
            r.fail(f"{key}.{k}", f"missing (rope_type {typ} needs it)")
    if typ != "default" and not rp["factor"] > 0:
        r.fail(f"{key}.factor", f"must be > 0, got {rp['factor']}")
    if typ == "llama3" and not rp["high_freq_factor"] > rp["low_freq_factor"] > 0:
        r.fail(f"{key}.high_freq_factor", "llama3 needs high_freq_factor > low_freq_factor > 0")
    if typ == "yarn":
        rp.setdefault("original_max_position_embeddings", max_pos)
    params = {k: (float(v) if k in ("factor", "beta_fast", "beta_slow") else v)  # [DC]: "Convert to float"
              for k, v in rp.items() if v is not None}
    return RopeConfig(rope_type=typ, theta=float(theta), params=params)


def parse_config(raw: dict, where: str = "") -> ArchConfig:
    """ArchConfig of config.json's content raw (where: its directory, for
    messages). ConfigError for an architecture not implemented natively,
    a missing or bad field, or a feature the native models refuse."""
    where = _where(where)
    mt = model_type_of(raw)
    if mt not in ARCHITECTURES:
        raise ConfigError(f"{where}: model_type {raw.get('model_type')!r} is not one of the native architectures "
                          f"({', '.join(ARCHITECTURES)})")
    archs = raw.get("architectures")
    if archs is not None and archs != [ARCHITECTURES[mt]]:
        raise ConfigError(f"{where}: architectures {archs!r}: model_type {mt} trains as [{ARCHITECTURES[mt]!r}]")
    r = _Reader(raw, where)
    act = raw.get("hidden_act", "silu")
    if act != "silu":
        r.fail("hidden_act", f"{act!r}: only silu is supported")
    for k in ("attention_bias", "mlp_bias", "use_sliding_window"):
        r.off(k)
    V = r.int("vocab_size", required=True)
    H = r.int("hidden_size", required=True)
    L = r.int("num_hidden_layers", required=True)
    nh = r.int("num_attention_heads", required=True)
    nkv = r.int("num_key_value_heads", nh)  # [Q3C]/[LC]: None -> num_attention_heads
    if nh % nkv:
        r.fail("num_key_value_heads", f"{nkv} does not divide num_attention_heads {nh}")
    I = r.int("intermediate_size", required=True)
    max_pos = r.int("max_position_embeddings", _MAX_POS[mt])
    # head_dim: [Q3C] class default 128; [QMM] getattr(config, "head_dim",
    # hidden_size // num_attention_heads); [LC] None -> hidden_size // heads
    if mt == "qwen3":
        hd = r.int("head_dim", 128)
    elif mt in ("qwen3_moe", "llama"):
        hd = r.int("head_dim", H // nh)
    else:
        hd = 0
    common = dict(
        model_type=mt, vocab_size=V, hidden_size=H, intermediate_size=I, num_hidden_layers=L,
        num_attention_heads=nh, num_key_value_heads=nkv, head_dim=hd,
        rms_norm_eps=r.float("rms_norm_eps", 1e-6), tie_word_embeddings=r.bool("tie_word_embeddings", False),
        max_position_embeddings=max_pos, rope=_rope(r, max_pos),
        pad_token_id=raw.get("pad_token_id"), bos_token_id=raw.get("bos_token_id"), eos_token_id=raw.get("eos_token_id"),
        raw=dict(raw),
    )
    pad = common["pad_token_id"]
    if pad is not None and (isinstance(pad, bool) or not isinstance(pad, int) or not 0 <= pad < V):
        r.fail("pad_token_id", f"must be null or an id in [0, {V}), got {pad!r}")
    if mt in ("qwen3", "llama"):
        return ArchConfig(**common, qk_norm=mt == "qwen3")
    if mt == "qwen3_moe":
        E = r.int("num_experts", required=True, lo=0)
        K = r.int("num_experts_per_tok", 8)
        if E and not 1 <= K <= E:
            r.fail("num_experts_per_tok", f"must be in [1, num_experts={E}], got {K}")
        step = r.int("decoder_sparse_step", 1)
        only = raw.get("mlp_only_layers") or []
        if not isinstance(only, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in only):
            r.fail("mlp_only_layers", f"must be a list of layer indices, got {only!r}")
        # [QMM] Qwen3MoeDecoderLayer: sparse when not in mlp_only_layers and
        # num_experts > 0 and (layer_idx + 1) % decoder_sparse_step == 0
        moe = tuple(l for l in range(L) if l not in only and E > 0 and (l + 1) % step == 0)
        return ArchConfig(**common, qk_norm=True, num_experts=E, top_k=K if E else 0,
                          moe_intermediate_size=r.int("moe_intermediate_size", required=bool(moe)) if moe else 0,
                          norm_topk_prob=r.bool("norm_topk_prob", False), moe_layer_ids=moe, router="softmax")
    # deepseek_v3 ([DC] defaults)
    E = r.int("n_routed_experts", 256)
    K = r.int("num_experts_per_tok", 8)
    G = r.int("n_group", 8)
    TG = r.int("topk_group", 4)
    if E % G:
        r.fail("n_group", f"{G} does not divide n_routed_experts {E}")
    if G > 1 and E // G < 2:
        r.fail("n_group", f"groups of {E // G} expert(s): group scores sum each group's top 2")
    if TG > G:
        r.fail("topk_group", f"{TG} > n_group {G}")
    if not 1 <= K <= TG * (E // G):
        r.fail("num_experts_per_tok", f"must be in [1, topk_group*experts_per_group={TG * (E // G)}], got {K}")
    if raw.get("scoring_func", "sigmoid") != "sigmoid":
        r.fail("scoring_func", f"{raw['scoring_func']!r}: deepseek_v3 routes with sigmoid")
    if raw.get("topk_method", "noaux_tc") != "noaux_tc":
        r.fail("topk_method", f"{raw['topk_method']!r}: deepseek_v3 routes with noaux_tc")
    if raw.get("moe_layer_freq", 1) != 1:
        r.fail("moe_layer_freq", "only 1 is supported (transformers' DeepseekV3 ignores it)")
    fk = r.int("first_k_dense_replace", 3, lo=0)
    qr = raw.get("q_lora_rank", 1536)
    if qr is not None:
        qr = r.int("q_lora_rank")
    return ArchConfig(
        **common, num_experts=E, top_k=K, moe_intermediate_size=r.int("moe_intermediate_size", 2048),
        norm_topk_prob=r.bool("norm_topk_prob", True),
        # [DM] DeepseekV3DecoderLayer: MoE when layer_idx >= first_k_dense_replace
        moe_layer_ids=tuple(range(fk, L)), router="sigmoid_grouped", n_group=G, topk_group=TG,
        routed_scaling_factor=r.float("routed_scaling_factor", 2.5), n_shared_experts=r.int("n_shared_experts", 1),
        mla=True, q_lora_rank=qr, kv_lora_rank=r.int("kv_lora_rank", 512),
        qk_nope_head_dim=r.int("qk_nope_head_dim", 128), qk_rope_head_dim=r.int("qk_rope_head_dim", 64),
        v_head_dim=r.int("v_head_dim", 128), rope_interleave=r.bool("rope_interleave", True))


def load_config(d: str) -> ArchConfig:
    return parse_config(read_config(d), d)
