"""Rotary position embeddings: inverse frequencies of the four rope types,
the cos/sin tables and their application.

Sources:
  [ROPE] huggingface/transformers src/transformers/modeling_rope_utils.py
         @ef46806472a64b0013ed413781e3afed82bfa047: _compute_default_rope_parameters
         (1 / theta ** (arange(0, dim, 2) / dim) in float32), linear (inv_freq /
         factor), _compute_llama3_parameters (wavelength bands), _compute_yarn_parameters
         (ramp between interpolated and extrapolated frequencies, correction
         range from beta_fast / beta_slow, floor / ceil).
  [VDS]  vllm-project/vllm vllm/model_executor/layers/rotary_embedding/deepseek_scaling_rope.py
         @7bc8d408139110c389bea6028e9fdfadb1eb7641 and common.py
         @1593f0c1de61ba1e6efb9315ac8d0a3d2fe14cdd: yarn's correction range uses
         original_max_position_embeddings, and cos/sin are multiplied by
         yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim)
         (the same attention_factor newer transformers computes when both
         mscale keys are set, else yarn_get_mscale(factor); an explicit
         attention_factor wins).
  [Q3M]  src/transformers/models/qwen3/modeling_qwen3.py @000c33fdfde12e1ffafbfcdb3c926df5727a00b6:
         freqs = inv_freq x position (float32), emb = cat(freqs, freqs),
         cos/sin * attention_scaling; rotate_half; q*cos + rotate_half(q)*sin.
  [DM]   src/transformers/models/deepseek_v3/modular_deepseek_v3.py @000c33fdfde12e1ffafbfcdb3c926df5727a00b6:
         apply_rotary_pos_emb_interleave (rope_interleave): each head's rotary
         part viewed as [d/2, 2] and transposed to [2, d/2] (even lanes first,
         then odd) before the rotate_half form.
"""

from __future__ import annotations

import math

import torch

from .config import RopeConfig, yarn_get_mscale


def inv_freq_and_scale(rope: RopeConfig, dim: int, max_pos: int) -> tuple[torch.Tensor, float]:
    """(inv_freq [dim/2] float32, attention_scaling) for a rotary size dim."""
    p = rope.params
    base = rope.theta
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    if rope.rope_type == "default":
        return inv, 1.0
    if rope.rope_type == "linear":
        return inv / p["factor"], 1.0
    if rope.rope_type == "llama3":
        factor, low, high = p["factor"], p["low_freq_factor"], p["high_freq_factor"]
        old = p["original_max_position_embeddings"]
        low_wl, high_wl = old / low, old / high
        wl = 2 * math.pi / inv
        out = torch.where(wl > low_wl, inv / factor, inv)
        smooth = (old / wl - low) / (high - low)
        smoothed = (1 - smooth) * out / factor + smooth * out
        medium = ~(wl < high_wl) & ~(wl > low_wl)
        return torch.where(medium, smoothed, out), 1.0
    # yarn
    factor = p["factor"]
    orig = p.get("original_max_position_embeddings", max_pos)
    att = p.get("attention_factor")
    if att is None:
        ms, msa = p.get("mscale"), p.get("mscale_all_dim")
        att = yarn_get_mscale(factor, ms) / yarn_get_mscale(factor, msa) if ms and msa else yarn_get_mscale(factor)
    beta_fast, beta_slow = p.get("beta_fast") or 32, p.get("beta_slow") or 1

    def corr(rot):
        return (dim * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(base))

    lo, hi = corr(beta_fast), corr(beta_slow)
    if p.get("truncate", True):
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, dim - 1)
    if lo == hi:
        hi += 0.001  # [ROPE] linear_ramp_factor: prevent a singularity
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - lo) / (hi - lo), 0, 1)
    pos_freqs = base ** (torch.arange(0, dim, 2).float() / dim)
    extra = 1 - ramp  # share of the extrapolated (unscaled) frequency
    inv = (1.0 / (factor * pos_freqs)) * (1 - extra) + (1.0 / pos_freqs) * extra
    return inv, float(att)


class Rope:
    """cos/sin tables of one model: cos_sin(positions) -> [..., dim]."""

    def __init__(self, rope: RopeConfig, dim: int, max_pos: int):
        self.dim = dim
        self.inv_freq, self.scaling = inv_freq_and_scale(rope, dim, max_pos)

    def cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.float().unsqueeze(-1) * self.inv_freq  # float32, as [Q3M]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos() * self.scaling, emb.sin() * self.scaling


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def apply(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleave: bool = False) -> torch.Tensor:
    """x [..., S, d] rotated by cos/sin [S, d] (broadcast over the leading
    dims). interleave: DeepSeek's layout, lanes (2i, 2i+1) form a pair."""
    if interleave:
        d = x.shape[-1]
        x = x.reshape(*x.shape[:-1], d // 2, 2).transpose(-1, -2).reshape(*x.shape[:-1], d)
    return x * cos + rotate_half(x) * sin
