"""Native PyTorch forward passes of qwen3, qwen3_moe, llama and deepseek_v3
over Hugging Face tensor names (no transformers needed). float32 compute.

The parameters live in an nn.Module tree whose dotted names are HF's
(model.layers.3.self_attn.q_proj.weight), registered in the order HF's
modules register them, so named_parameters(), the optimiser state and a
state-dict-ordered shard split all follow HF. The forward pass is written
over a name -> tensor dict, so the same code runs on the float32 masters
or on the served (fake-quantised) copies.

Sources (huggingface/transformers unless noted; read at these commits):
  [Q3M] src/transformers/models/qwen3/modeling_qwen3.py @000c33fdfde12e1ffafbfcdb3c926df5727a00b6
        Qwen3RMSNorm (x * rsqrt(mean(x^2) + eps), then weight *), Qwen3MLP
        (down(silu(gate(x)) * up(x))), Qwen3Attention (q_norm / k_norm over each
        head's head_dim before RoPE; scaling head_dim**-0.5; repeat_kv for
        GQA; softmax in float32), Qwen3DecoderLayer (pre-norm residual
        blocks), Qwen3Model (embed, layers, final norm), Qwen3ForCausalLM
        (lm_head, tied to embed_tokens when tie_word_embeddings).
  [QMM] src/transformers/models/qwen3_moe/modeling_qwen3_moe.py @00d4b3d2142cb4ced2f51b90614b5d26bc045015
        Qwen3MoeSparseMoeBlock: router_logits = gate(x); softmax in float32
        over all experts; top-k; renormalised over the k when norm_topk_prob;
        sum of weight * expert(x). Tensors mlp.gate.weight and
        mlp.experts.{e}.{gate,up,down}_proj.weight (the per-expert
        checkpoint names).
  [LC]  src/transformers/models/llama/configuration_llama.py @008e574391258935f3ecc3035c882e73bbcac419
        llama is qwen3's block without q/k norms (head_dim defaults to
        hidden_size // num_attention_heads); rope type llama3 in rope.py.
  [DM]  src/transformers/models/deepseek_v3/modular_deepseek_v3.py @000c33fdfde12e1ffafbfcdb3c926df5727a00b6
        DeepseekV3Attention (MLA): q = q_proj(x) when q_lora_rank is null,
        else q_b_proj(q_a_layernorm(q_a_proj(x))); kv_a_proj_with_mqa(x) =
        [latent (kv_lora_rank) | k_rot (qk_rope_head_dim, one head shared by
        all heads)]; kv_b_proj(kv_a_layernorm(latent)) = per head [k_nope |
        v]; RoPE on q's and k's rotary parts only (interleaved lanes when
        rope_interleave); query = [q_nope | q_rot], key = [k_nope | k_rot];
        scaling in config.softmax_scale(). q_a_layernorm and kv_a_layernorm
        are DeepseekV3RMSNorm(size) with the class default eps 1e-6 (not
        rms_norm_eps; vLLM's deepseek_v2.py passes rms_norm_eps -- the two
        agree for every released config, which all use 1e-6).
        DeepseekV3TopkRouter: router_logits = x.float() @ weight.float().T.
        DeepseekV3MoE.route_tokens_to_experts: scores = sigmoid(logits);
        choice = scores + e_score_correction_bias (selection only); group
        score = sum of the group's top 2 choice values; keep the topk_group
        best groups; top-k experts among them; weights = scores (without the
        bias) at the chosen ids, / (sum + 1e-20) when norm_topk_prob, times
        routed_scaling_factor; plus shared_experts(x) (an MLP of
        moe_intermediate_size * n_shared_experts). Layers below
        first_k_dense_replace are dense MLPs of intermediate_size.
        e_score_correction_bias is a buffer kept in float32
        (_keep_in_fp32_modules_strict), not a trained parameter.
  Masked groups: transformers fills the other groups' choice values with
  0.0 (as here, and as the Go engine does); vLLM's grouped_topk uses -inf.
  They differ only when fewer than top_k experts of the chosen groups have
  a positive biased score (never for a zero or small bias).

Routes (R3): route_layers(cfg) says which decoder layers the rows of a
routes array cover (every decoder layer of a MoE model); a routes tensor
[tokens, len(route_layers), top_k] replays row j on MoE layer
route_layers(cfg)[j] (a dense layer's row is not read) -- the router's top-k choice is
replaced by those ids, the gate weights still come from this router's
scores at them (softmax probabilities, renormalised when norm_topk_prob;
deepseek_v3: sigmoid scores without the correction bias, normalised when
norm_topk_prob, times routed_scaling_factor), so the router keeps its
gradient.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn

from .. import model as builtin
from . import rope as rp
from .config import ArchConfig

MLA_NORM_EPS = 1e-6  # [DM] DeepseekV3RMSNorm(q_lora_rank) / (kv_lora_rank): class default eps


def route_layers(cfg: ArchConfig) -> tuple[int, ...]:
    """The decoder layers that the rows of a routes array cover, in order
    -- the one place that fixes the R3 layout on the torch side; it must
    equal the engine's. A MoE model's rows cover every decoder layer, row
    l = decoder layer l, as vLLM's routed-experts capturer lays them out
    (buffer [tokens, num_hidden_layers, num_experts_per_tok], zeroed, each
    FusedMoE writing [:, layer_id, :]: vllm-project/vllm @00bd1493
    vllm/model_executor/layers/fused_moe/routed_experts_capturer.py, as
    model/transformer/doc.go "Routes (R3)" derives it for the Go engine,
    which reports the same). The rows of dense layers (a deepseek_v3's
    first_k_dense_replace layers, a qwen3_moe's mlp_only_layers) are zeros
    from the engine and never read here. A dense model has no rows. To
    cover only the MoE layers instead, return tuple(cfg.moe_layer_ids)."""
    return tuple(range(cfg.num_hidden_layers)) if cfg.moe_layer_ids else ()


def tensor_specs(c: ArchConfig) -> list[tuple[str, tuple[int, ...], bool]]:
    """Every tensor of the checkpoint, (HF name, shape, trainable), in the
    order HF's modules register them."""
    H, V = c.hidden_size, c.vocab_size
    out: list[tuple[str, tuple[int, ...], bool]] = [("model.embed_tokens.weight", (V, H), True)]

    def mlp(prefix, inter):
        out.extend([(f"{prefix}gate_proj.weight", (inter, H), True), (f"{prefix}up_proj.weight", (inter, H), True),
                    (f"{prefix}down_proj.weight", (H, inter), True)])

    for l in range(c.num_hidden_layers):
        p = f"model.layers.{l}."
        a = p + "self_attn."
        if c.mla:
            nh = c.num_attention_heads
            if c.q_lora_rank is None:
                out.append((a + "q_proj.weight", (nh * c.qk_head_dim, H), True))
            else:
                out.extend([(a + "q_a_proj.weight", (c.q_lora_rank, H), True),
                            (a + "q_a_layernorm.weight", (c.q_lora_rank,), True),
                            (a + "q_b_proj.weight", (nh * c.qk_head_dim, c.q_lora_rank), True)])
            out.extend([(a + "kv_a_proj_with_mqa.weight", (c.kv_lora_rank + c.qk_rope_head_dim, H), True),
                        (a + "kv_a_layernorm.weight", (c.kv_lora_rank,), True),
                        (a + "kv_b_proj.weight", (nh * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank), True),
                        (a + "o_proj.weight", (H, nh * c.v_head_dim), True)])
        else:
            hd, nh, nkv = c.head_dim, c.num_attention_heads, c.num_key_value_heads
            out.extend([(a + "q_proj.weight", (nh * hd, H), True), (a + "k_proj.weight", (nkv * hd, H), True),
                        (a + "v_proj.weight", (nkv * hd, H), True), (a + "o_proj.weight", (H, nh * hd), True)])
            if c.qk_norm:
                out.extend([(a + "q_norm.weight", (hd,), True), (a + "k_norm.weight", (hd,), True)])
        m = p + "mlp."
        if not c.is_moe_layer(l):
            mlp(m, c.intermediate_size)
        elif c.router == "softmax":  # [QMM]: gate, then experts
            out.append((m + "gate.weight", (c.num_experts, H), True))
            for e in range(c.num_experts):
                mlp(f"{m}experts.{e}.", c.moe_intermediate_size)
        else:  # [DM] (per-expert modules): experts, gate, shared_experts
            for e in range(c.num_experts):
                mlp(f"{m}experts.{e}.", c.moe_intermediate_size)
            out.extend([(m + "gate.weight", (c.num_experts, H), True),
                        (m + "gate.e_score_correction_bias", (c.num_experts,), False)])
            mlp(m + "shared_experts.", c.moe_intermediate_size * c.n_shared_experts)
        out.extend([(p + "input_layernorm.weight", (H,), True), (p + "post_attention_layernorm.weight", (H,), True)])
    out.append(("model.norm.weight", (H,), True))
    if not c.tie_word_embeddings:
        out.append(("lm_head.weight", (V, H), True))
    return out


def fake_quantized(name: str, t: torch.Tensor) -> bool:
    """Whether INT4 fake quantisation (loss.fake_quant) applies to tensor
    name: every 2-D projection weight of attention, dense MLPs, experts and
    shared experts (q/k/v/o_proj, q_a/q_b_proj, kv_a_proj_with_mqa,
    kv_b_proj, gate/up/down_proj). Never the embedding, lm_head, norms, the
    router (mlp.gate.weight) or e_score_correction_bias (REALMODELS.md)."""
    if t.dim() != 2 or not name.startswith("model.layers."):
        return False
    return name.endswith("_proj.weight") or name.endswith(".kv_a_proj_with_mqa.weight")


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _mlp(t: dict, prefix: str, x: torch.Tensor) -> torch.Tensor:
    return F.linear(F.silu(F.linear(x, t[prefix + "gate_proj.weight"])) * F.linear(x, t[prefix + "up_proj.weight"]),
                    t[prefix + "down_proj.weight"])


def top_k_ids(scores: torch.Tensor, k: int) -> torch.Tensor:
    """The k largest scores' ids per row, largest first, ties to the lower id."""
    return torch.sort(scores, dim=-1, descending=True, stable=True).indices[..., :k]


def _attend(q, k, v, scale: float, start: int) -> torch.Tensor:
    """Causal attention of queries at positions start.. over keys 0..T-1;
    q [B, nh, S, d], k [B, nkv, T, d], v [B, nkv, T, dv] (GQA: each kv
    head serves nh/nkv query heads, as repeat_kv)."""
    B, nh, S, _ = q.shape
    nkv, T = k.shape[1], k.shape[2]
    if nkv != nh:
        rep = nh // nkv
        k = k[:, :, None].expand(B, nkv, rep, T, k.shape[-1]).reshape(B, nh, T, k.shape[-1])
        v = v[:, :, None].expand(B, nkv, rep, T, v.shape[-1]).reshape(B, nh, T, v.shape[-1])
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    if S > 1:
        # key j is visible to query i iff j <= start + i
        s = s.masked_fill(torch.ones(S, T, dtype=torch.bool).triu(start + 1), float("-inf"))
    return torch.matmul(torch.softmax(s, dim=-1), v)


class KVCache:
    """Per-layer keys and values of the positions seen so far (decode)."""

    def __init__(self, batch: int, max_len: int):
        self.batch, self.max_len, self.len = batch, max_len, 0
        self.kv: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        S = k.shape[2]
        if self.len + S > self.max_len:
            raise ValueError(f"KV cache of {self.max_len} positions is full")
        if layer not in self.kv:
            self.kv[layer] = (k.new_empty(k.shape[0], k.shape[1], self.max_len, k.shape[3]),
                              v.new_empty(v.shape[0], v.shape[1], self.max_len, v.shape[3]))
        kb, vb = self.kv[layer]
        kb[:, :, self.len:self.len + S] = k
        vb[:, :, self.len:self.len + S] = v
        return kb[:, :, :self.len + S], vb[:, :, :self.len + S]


class _STE(torch.autograd.Function):
    """Forward the served value, pass the gradient to the master unchanged."""

    @staticmethod
    def forward(ctx, w, served):
        return served

    @staticmethod
    def backward(ctx, g):
        return g, None


class CausalLM(nn.Module):
    """One of the four architectures with HF tensor names. tensors (name ->
    tensor, any float dtype) fills it; absent, everything is zero (load or
    initialise afterwards)."""

    def __init__(self, cfg: ArchConfig, tensors: dict | None = None):
        super().__init__()
        self.cfg = cfg
        self.specs = tensor_specs(cfg)
        self._slots: list[tuple[str, nn.Module, str]] = []
        for name, shape, trainable in self.specs:
            *path, leaf = name.split(".")
            mod: nn.Module = self
            for part in path:
                sub = mod._modules.get(part)
                if sub is None:
                    sub = nn.Module()
                    mod.add_module(part, sub)
                mod = sub
            src = tensors[name] if tensors is not None else torch.zeros(shape)
            val = src.detach().to(torch.float32).clone()
            if trainable:
                mod.register_parameter(leaf, nn.Parameter(val))
            else:
                mod.register_buffer(leaf, val)
            self._slots.append((name, mod, leaf))
        self.rope = rp.Rope(cfg.rope, cfg.rotary_dim, cfg.max_position_embeddings)
        self.route_layer_ids = route_layers(cfg)
        # the routes columns of MoE layers (a dense layer's column is never read)
        self._route_slot = {l: j for j, l in enumerate(self.route_layer_ids) if cfg.is_moe_layer(l)}
        self._moe_cols = torch.tensor(sorted(self._route_slot.values()), dtype=torch.long)
        self.scale = cfg.softmax_scale()
        self.fake_quant = "none"  # or a key of model.FAKE_QUANT_GROUPS (Init loss.fake_quant)
        # a LoRA adapter (hf/lora.py LoRA.apply): the forward computes with
        # the base tensors, not differentiated, and the adapter's merged
        # projections; None = the plain model. Not a submodule: parameters()
        # stays the checkpoint's tensors.
        object.__setattr__(self, "adapter", None)

    # --- tensors ---------------------------------------------------------------

    def named_tensors(self) -> "OrderedDict[str, torch.Tensor]":
        """Every checkpoint tensor (parameters and the router bias buffers)
        under its HF name, in HF's registration order."""
        return OrderedDict((name, getattr(mod, leaf)) for name, mod, leaf in self._slots)

    def trainable(self) -> list[nn.Parameter]:
        return list(self.parameters())

    def served_tensors(self) -> dict[str, torch.Tensor]:
        """The tensors an engine serving the BF16 checkpoint with
        engines.quantize = self.fake_quant computes with: fake_quantized()
        ones INT4 (weights/quant/int4.go's rule, model.fake_int4), the rest
        BF16, each the forward value of a straight-through node. Buffers
        (the router correction bias) are served as stored."""
        group = builtin.FAKE_QUANT_GROUPS[self.fake_quant]
        out = {}
        for name, w in self.named_tensors().items():
            if not w.requires_grad:
                out[name] = w
            elif fake_quantized(name, w):
                out[name] = _STE.apply(w, builtin.fake_int4(w, group))
            else:
                out[name] = _STE.apply(w, builtin.bf16(w.detach()))
        return out

    def _tensors(self) -> dict[str, torch.Tensor]:
        t = dict(self.named_tensors()) if self.fake_quant == "none" else self.served_tensors()
        if self.adapter is not None:
            t = self.adapter.apply({n: v.detach() for n, v in t.items()})
        return t

    def set_adapter(self, adapter) -> None:
        """Compute with adapter (hf/lora.py LoRA) applied; None removes it."""
        object.__setattr__(self, "adapter", adapter)

    # --- forward -----------------------------------------------------------------

    def check_routes(self, routes: torch.Tensor, lead: tuple[int, ...]) -> torch.Tensor:
        c = self.cfg
        want = (*lead, len(self.route_layer_ids), c.top_k)
        if not self.route_layer_ids:
            raise ValueError("routes given but the model has no routed experts")
        routes = torch.as_tensor(routes).long()
        if tuple(routes.shape) != want:
            raise ValueError(f"routes of shape {list(routes.shape)}, want {list(want)}")
        moe = routes.index_select(len(lead), self._moe_cols)  # dense layers' rows are not read
        if bool(((moe < 0) | (moe >= c.num_experts)).any()):
            raise ValueError(f"route id outside [0, {c.num_experts})")
        if c.top_k > 1 and bool((moe.sort(-1).values.diff(dim=-1) == 0).any()):
            raise ValueError("an expert listed twice in a layer's routes")
        return routes

    def forward_hidden(self, tokens: torch.Tensor, routes: torch.Tensor | None = None,
                       cache: KVCache | None = None, t: dict | None = None, valid: torch.Tensor | None = None):
        """Final-normed hidden states [B, S, H] of tokens [B, S] (positions
        from cache.len, else 0) and the routes used, [B, S, len(route_layers),
        top_k] (None for a dense model). routes replays experts (R3).
        valid [B, S] bool marks the real positions of a right-padded batch:
        padding skips the experts (its output is never read), so the rows
        each expert computes, and hence their rounding, do not depend on
        what the padding would have routed to."""
        c = self.cfg
        rows = None if valid is None else valid.reshape(-1).nonzero(as_tuple=True)[0]
        t = self._tensors() if t is None else t
        B, S = tokens.shape
        start = cache.len if cache is not None else 0
        if routes is not None:
            routes = self.check_routes(routes, (B, S))
        x = F.embedding(tokens, t["model.embed_tokens.weight"], padding_idx=c.pad_token_id)
        cos, sin = self.rope.cos_sin(torch.arange(start, start + S))
        used = [None] * len(self.route_layer_ids)
        for l in range(c.num_hidden_layers):
            p = f"model.layers.{l}."
            h = _rms(x, t[p + "input_layernorm.weight"], c.rms_norm_eps)
            att = self._mla if c.mla else self._attn
            x = x + att(t, p + "self_attn.", h, cos, sin, cache, l, start)
            h = _rms(x, t[p + "post_attention_layernorm.weight"], c.rms_norm_eps)
            if c.is_moe_layer(l):
                j = self._route_slot.get(l)
                r = routes[:, :, j].reshape(B * S, -1) if (routes is not None and j is not None) else None
                hf = h.reshape(B * S, -1)
                if rows is None:
                    m, sel = self._moe(t, p + "mlp.", hf, r)
                else:
                    mv, sv = self._moe(t, p + "mlp.", hf[rows], None if r is None else r[rows])
                    m = hf.new_zeros(hf.shape).index_copy(0, rows, mv)
                    sel = torch.zeros(B * S, c.top_k, dtype=torch.long).index_copy(0, rows, sv)
                x = x + m.view(B, S, -1)
                if j is not None:
                    used[j] = sel.view(B, S, -1)
            else:
                x = x + _mlp(t, p + "mlp.", h)
        if cache is not None:
            cache.len += S
        x = _rms(x, t["model.norm.weight"], c.rms_norm_eps)
        if not used:
            return x, None
        fill = torch.zeros(B, S, c.top_k, dtype=torch.long)  # a dense layer's row, as the engine reports it
        return x, torch.stack([u if u is not None else fill for u in used], dim=2)

    def lm_logits(self, hidden: torch.Tensor, t: dict | None = None) -> torch.Tensor:
        return F.linear(hidden, self.head_weight(t))

    def _attn(self, t, a, h, cos, sin, cache, l, start):
        c = self.cfg
        B, S, _ = h.shape
        hd, nh, nkv = c.head_dim, c.num_attention_heads, c.num_key_value_heads
        q = F.linear(h, t[a + "q_proj.weight"]).view(B, S, nh, hd)
        k = F.linear(h, t[a + "k_proj.weight"]).view(B, S, nkv, hd)
        v = F.linear(h, t[a + "v_proj.weight"]).view(B, S, nkv, hd).transpose(1, 2)
        if c.qk_norm:
            q = _rms(q, t[a + "q_norm.weight"], c.rms_norm_eps)
            k = _rms(k, t[a + "k_norm.weight"], c.rms_norm_eps)
        q = rp.apply(q.transpose(1, 2), cos, sin)
        k = rp.apply(k.transpose(1, 2), cos, sin)
        if cache is not None:
            k, v = cache.update(l, k, v)
        o = _attend(q, k, v, self.scale, start)
        return F.linear(o.transpose(1, 2).reshape(B, S, nh * hd), t[a + "o_proj.weight"])

    def _mla(self, t, a, h, cos, sin, cache, l, start):
        c = self.cfg
        B, S, _ = h.shape
        nh, nope, rope_d, vd = c.num_attention_heads, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim
        if c.q_lora_rank is None:
            q = F.linear(h, t[a + "q_proj.weight"])
        else:
            q = F.linear(_rms(F.linear(h, t[a + "q_a_proj.weight"]), t[a + "q_a_layernorm.weight"], MLA_NORM_EPS),
                         t[a + "q_b_proj.weight"])
        q_nope, q_rot = q.view(B, S, nh, c.qk_head_dim).transpose(1, 2).split([nope, rope_d], dim=-1)
        latent, k_rot = F.linear(h, t[a + "kv_a_proj_with_mqa.weight"]).split([c.kv_lora_rank, rope_d], dim=-1)
        kv = F.linear(_rms(latent, t[a + "kv_a_layernorm.weight"], MLA_NORM_EPS), t[a + "kv_b_proj.weight"])
        k_nope, v = kv.view(B, S, nh, nope + vd).transpose(1, 2).split([nope, vd], dim=-1)
        q_rot = rp.apply(q_rot, cos, sin, c.rope_interleave)
        k_rot = rp.apply(k_rot.view(B, 1, S, rope_d), cos, sin, c.rope_interleave)
        q = torch.cat((q_nope, q_rot), dim=-1)
        k = torch.cat((k_nope, k_rot.expand(B, nh, S, rope_d)), dim=-1)
        if cache is not None:
            k, v = cache.update(l, k, v)
        o = _attend(q, k, v, self.scale, start)
        return F.linear(o.transpose(1, 2).reshape(B, S, nh * vd), t[a + "o_proj.weight"])

    def _moe(self, t, m, h, routes):
        """One sparse block over h [N, H]; routes [N, top_k] replays.
        Returns (output [N, H], the expert ids used [N, top_k])."""
        c = self.cfg
        if c.router == "softmax":
            probs = torch.softmax(F.linear(h, t[m + "gate.weight"]).float(), dim=-1)
            sel = top_k_ids(probs.detach(), c.top_k) if routes is None else routes
            w = probs.gather(1, sel)
            if c.norm_topk_prob:
                w = w / w.sum(-1, keepdim=True)
            return self._experts(t, m + "experts.", h, sel, w), sel
        scores = torch.sigmoid(F.linear(h.float(), t[m + "gate.weight"].float()))
        sel = self.deepseek_select(scores.detach(), t[m + "gate.e_score_correction_bias"]) if routes is None else routes
        w = scores.gather(1, sel)
        if c.norm_topk_prob:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        w = w * c.routed_scaling_factor
        return self._experts(t, m + "experts.", h, sel, w) + _mlp(t, m + "shared_experts.", h), sel

    def deepseek_select(self, scores: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """[DM] noaux_tc selection: the bias shifts the choice only."""
        c = self.cfg
        choice = scores + bias.float()
        if c.n_group > 1 and c.topk_group < c.n_group:
            N, E = choice.shape
            grouped = choice.view(N, c.n_group, E // c.n_group)
            gscore = grouped.topk(2, dim=-1).values.sum(-1)
            keep = torch.zeros_like(gscore, dtype=torch.bool).scatter_(1, top_k_ids(gscore, c.topk_group), True)
            choice = grouped.masked_fill(~keep.unsqueeze(-1), 0.0).view(N, E)
        return top_k_ids(choice, c.top_k)

    @staticmethod
    def _experts(t, prefix, h, sel, w):
        out = torch.zeros_like(h)
        for e in torch.unique(sel).tolist():
            tok, slot = (sel == e).nonzero(as_tuple=True)
            y = _mlp(t, f"{prefix}{e}.", h[tok]) * w[tok, slot].unsqueeze(-1).to(h.dtype)
            out = out.index_add(0, tok, y)
        return out

    # --- the trainer's and the benchmarks' entry points -------------------------

    def hidden_packed(self, seqs: list[torch.Tensor], positions: list[torch.Tensor],
                      routes: list[torch.Tensor] | None = None):
        """The final-normed hidden states that predict seqs[i][p] for each p
        in positions[i] (p >= 1), concatenated over i in order ([N, H]), and
        the tensors they were computed with (for head_weight): each sequence
        attends only to itself, from position 0 (right-padded into one batch;
        the padding comes after every real token, so the causal mask already
        hides it). routes[i] [len(seqs[i]), len(route_layers), top_k] replays
        the sequence's experts, row q at position q."""
        c = self.cfg
        B = len(seqs)
        lens = [len(s) for s in seqs]
        S = max(lens)
        tok = torch.zeros(B, S, dtype=torch.long)
        for i, s in enumerate(seqs):
            tok[i, :lens[i]] = s.long()
        r = None
        if routes is not None:
            r = torch.arange(c.top_k).expand(B, S, len(self.route_layer_ids), c.top_k).clone()
            for i, ri in enumerate(routes):
                r[i, :lens[i]] = self.check_routes(ri, (lens[i],))
        t = self._tensors()
        valid = torch.arange(S)[None, :] < torch.tensor(lens)[:, None]
        hidden, _ = self.forward_hidden(tok, r, t=t, valid=valid if self.route_layer_ids else None)
        bi = torch.cat([torch.full((len(p),), i, dtype=torch.long) for i, p in enumerate(positions)])
        pi = torch.cat([p.long() - 1 for p in positions])
        if len(pi) and (int(pi.min()) < 0 or bool((pi >= torch.tensor(lens)[bi]).any())):
            raise ValueError("a position outside [1, len(sequence)]")
        return hidden[bi, pi], t

    def head_weight(self, t: dict | None = None) -> torch.Tensor:
        """lm_head's weight [V, H] as computed with (the embedding when tied)."""
        t = self._tensors() if t is None else t
        return t["model.embed_tokens.weight"] if self.cfg.tie_word_embeddings else t["lm_head.weight"]

    def logits_packed(self, seqs: list[torch.Tensor], positions: list[torch.Tensor],
                      routes: list[torch.Tensor] | None = None) -> torch.Tensor:
        """Logits [N, V] of hidden_packed's rows (the whole vocabulary at
        once: tests and small cases; the trainer uses hidden_packed)."""
        hidden, t = self.hidden_packed(seqs, positions, routes)
        return self.lm_logits(hidden, t)

    def logits_at(self, tokens: torch.Tensor, positions: torch.Tensor, routes=None) -> torch.Tensor:
        return self.logits_packed([tokens], [positions], None if routes is None else [routes])

    @torch.no_grad()
    def routes(self, tokens) -> torch.Tensor:
        """The routes this model chooses at every position of tokens
        [len, len(route_layers), top_k] (row q = the pass whose input ends at
        tokens[q], as an engine reports them)."""
        tok = torch.as_tensor(list(tokens), dtype=torch.long).unsqueeze(0)
        return self.forward_hidden(tok)[1][0]

    @torch.no_grad()
    def generate_greedy(self, prompts: torch.Tensor, n: int) -> torch.Tensor:
        """Greedy decode n tokens after prompts [B, P] with a KV cache
        (prefill, then one position per step); returns [B, n]."""
        B, P = prompts.shape
        cache = KVCache(B, P + n)
        t = self._tensors()
        hidden, _ = self.forward_hidden(prompts.long(), cache=cache, t=t)
        nxt = self.lm_logits(hidden[:, -1], t).argmax(-1)
        out = [nxt]
        for _ in range(n - 1):
            hidden, _ = self.forward_hidden(nxt.unsqueeze(1), cache=cache, t=t)
            nxt = self.lm_logits(hidden[:, -1], t).argmax(-1)
            out.append(nxt)
        return torch.stack(out, 1)
