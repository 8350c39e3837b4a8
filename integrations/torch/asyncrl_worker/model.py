"""A torch port of asyncrl's built-in policy (model/model.go, model/checkpoint.go).

The network is a windowed MLP. To predict the token after tokens[:i] it looks at
the last `window` tokens, slot k = tokens[i-1-k] (slot 0 the most recent); slots
before the sequence start (and ids outside the vocabulary) read as PAD (id 0).
x = concat_k embed[ctx_k] (slot 0 first, so layer 0's weight columns
[k*embed_dim, (k+1)*embed_dim) belong to slot k); h = tanh(W_l x + b_l) for each
of `layers` layers; logits = head.weight h + head.bias.

Tensor names and shapes (policy.layout): embed.weight [V, D];
layers.{l}.weight [H, in_l] (in_0 = window*D, else H); layers.{l}.bias [H];
head.weight [V, H]; head.bias [V]. config.json: {"model_type":
"asyncrl-window-mlp", vocab_size, window, embed_dim, hidden, layers,
max_seq_len, "torch_dtype": "bfloat16" (serving) | "float32" (trainer)}.

Mixture of experts (config experts > 0, top_k; model/moe.go; both keys absent
from a dense model's config.json): every hidden layer is E tanh experts and a
bias-free router. r = R x; S = the top_k largest r (largest first, ties to the
lower id); g = softmax(r[S]); h = sum_s g_s tanh(W_s x + b_s). Tensors per
layer: layers.{l}.experts.weight [E, H, in_l], layers.{l}.router.weight
[E, in_l], layers.{l}.experts.bias [E, H]. Routes of a position are the S of
every layer, [layers, top_k]; route replay (R3) passes the engine's routes so
the experts are not re-chosen (the gates still come from this router's logits
over them).
"""

from __future__ import annotations

import json
import math
import os

import torch
from torch import nn

from . import safetensors as st

MODEL_TYPE = "asyncrl-window-mlp"
PAD = 0
CONFIG_FIELDS = ("vocab_size", "window", "embed_dim", "hidden", "layers", "max_seq_len")
MOE_FIELDS = ("experts", "top_k")  # optional; 0 / absent = dense (policy.Config omitempty)
MAX_EXPERTS = 1024  # policy.maxExperts
# policy.Config.Validate bounds.
_BOUNDS = {"vocab_size": (3, 1 << 20), "window": (1, 4096), "embed_dim": (1, 4096),
           "hidden": (1, 16384), "layers": (1, 64), "max_seq_len": (1, 1 << 24)}
DEFAULT_CONFIG = {"vocab_size": 98, "window": 16, "embed_dim": 16, "hidden": 128, "layers": 1, "max_seq_len": 256}


def validate_config(cfg: dict) -> dict:
    """Return the shape fields of cfg; raise ValueError naming the first bad one.
    model_type and torch_dtype may be present; other keys are rejected."""
    extra = set(cfg) - set(CONFIG_FIELDS) - set(MOE_FIELDS) - {"model_type", "torch_dtype"}
    if extra:
        raise ValueError(f"unknown config key {sorted(extra)[0]!r}")
    if cfg.get("model_type", MODEL_TYPE) != MODEL_TYPE:
        raise ValueError(f"model_type {cfg.get('model_type')!r}, want {MODEL_TYPE!r}")
    out = {}
    for k in CONFIG_FIELDS:
        v = cfg.get(k)
        lo, hi = _BOUNDS[k]
        if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
            raise ValueError(f"{k} must be an integer in [{lo}, {hi}], got {v!r}")
        out[k] = v
    e, k = cfg.get("experts", 0), cfg.get("top_k", 0)
    for name, v in (("experts", e), ("top_k", k)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise ValueError(f"{name} must be an integer, got {v!r}")
    if not 0 <= e <= MAX_EXPERTS:
        raise ValueError(f"experts must be in [0, {MAX_EXPERTS}] (0 = dense), got {e}")
    if e == 0 and k != 0:
        raise ValueError(f"top_k must be 0 for a dense model (experts 0), got {k}")
    if e > 0 and not 1 <= k <= e:
        raise ValueError(f"top_k must be in [1, experts={e}], got {k}")
    if e > 0:
        out["experts"], out["top_k"] = e, k
    return out


def top_k_routes(r: torch.Tensor, k: int) -> torch.Tensor:
    """The k largest router logits' ids per row, largest first, ties to the
    lower id (policy.topK): a stable descending sort keeps equal ids in order."""
    return torch.sort(r, dim=-1, descending=True, stable=True).indices[..., :k]


class MoELayer(nn.Module):
    """One mixture layer (model/moe.go): E tanh experts, a bias-free router."""

    def __init__(self, in_features: int, hidden: int, experts: int, top_k: int):
        super().__init__()
        self.in_features, self.top_k = in_features, top_k
        self.experts_weight = nn.Parameter(torch.empty(experts, hidden, in_features))
        self.router_weight = nn.Parameter(torch.empty(experts, in_features))
        self.experts_bias = nn.Parameter(torch.zeros(experts, hidden))

    def forward(self, x: torch.Tensor, routes: torch.Tensor | None = None):
        """x [P, in] → (h [P, H], routes [P, top_k]); routes given = replay."""
        return moe_layer(x, self.experts_weight, self.router_weight, self.experts_bias, self.top_k, routes)


def moe_layer(x, experts_weight, router_weight, experts_bias, top_k: int, routes=None):
    """MoELayer.forward on the given tensors (the parameters, or the served
    copies of a fake-quantised pass)."""
    r = x @ router_weight.T  # [P, E]
    sel = top_k_routes(r, top_k) if routes is None else routes.long()
    g = torch.softmax(r.gather(1, sel), dim=-1)  # [P, K]
    # every expert's pre-activation, then the chosen ones (tiny E)
    z = torch.einsum("ehi,pi->peh", experts_weight, x) + experts_bias  # [P, E, H]
    a = torch.tanh(z.gather(1, sel.unsqueeze(-1).expand(-1, -1, z.shape[-1])))  # [P, K, H]
    return (g.unsqueeze(-1) * a).sum(1), sel


# Fake quantisation (trainer.fake_quant), as Go's model.Model.Quantized and
# weights/quant.FakeQuantINT4: symmetric INT4 per group of `group` inputs of
# a row, scale = max(amax * float32(1/7), 1e-5) in float32, q = round half
# to even of w/scale (so |q| <= 7), served weight BF16(q * BF16(scale)) -- the
# symmetric branch of THUDM/slime
# slime/backends/megatron_utils/kernels/int4_qat/fake_int4_quant_cuda.cu and
# vLLM's uint4b8 (vllm/model_executor/layers/quantization/compressed_tensors/
# schemes/compressed_tensors_wNa16.py).
FAKE_QUANT_GROUPS = {"none": 0, "int4_g32": 32, "int4_g128": 128}


def bf16(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.bfloat16).to(torch.float32)


def fake_quantized(name: str, t: torch.Tensor) -> bool:
    """Whether the engine quantises tensor `name` (policy.quantizable, listed
    by model.Model.QuantizedTensors): the Linear weights -- layers.{l}.weight,
    head.weight and a mixture's layers.{l}.experts.weight (each expert's
    [H, in] matrix). The embedding, every bias (a mixture's
    layers.{l}.experts.bias [E, H] too) and a mixture's router.weight (vLLM
    keeps an MoE gate unquantised) stay BF16."""
    return (t.dim() in (2, 3) and name.endswith(".weight") and name != "embed.weight"
            and not name.endswith(".router.weight"))


def fake_int4(w: torch.Tensor, group: int) -> torch.Tensor:
    """The INT4 weights an engine serves for BF16(w) [rows, cols], float32;
    a mixture's [E, H, in] expert weights as E matrices [H, in] (groups run
    along a row, so that is the [E*H, in] matrix)."""
    if w.dim() == 3:
        return fake_int4(w.reshape(-1, w.shape[-1]), group).view(w.shape)
    rows, cols = w.shape
    x = torch.nn.functional.pad(bf16(w.detach()), (0, (-cols) % group)).view(rows, -1, group)
    amax = x.abs().amax(-1, keepdim=True)
    s = torch.clamp(amax * torch.tensor(1 / 7, dtype=torch.float32), min=1e-5)
    q = torch.round(x / s).clamp(-8, 7)
    return bf16(q * bf16(s)).view(rows, -1)[:, :cols]


class _STE(torch.autograd.Function):
    """Forward: the served weights (exactly); backward: the gradient passes
    to the float32 master unchanged (straight-through estimator)."""

    @staticmethod
    def forward(ctx, w, served):
        return served

    @staticmethod
    def backward(ctx, g):
        return g, None


class WindowMLP(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        self.cfg = validate_config(cfg)
        c = self.cfg
        self.embed = nn.Embedding(c["vocab_size"], c["embed_dim"])
        dims = [c["window"] * c["embed_dim"]] + [c["hidden"]] * c["layers"]
        self.experts = c.get("experts", 0)
        if self.experts:
            self.layers = nn.ModuleList(MoELayer(dims[l], c["hidden"], self.experts, c["top_k"]) for l in range(c["layers"]))
        else:
            self.layers = nn.ModuleList(nn.Linear(dims[l], c["hidden"]) for l in range(c["layers"]))
        self.head = nn.Linear(c["hidden"], c["vocab_size"])
        # "none" or a key of FAKE_QUANT_GROUPS (worker Init loss.fake_quant)
        self.fake_quant = "none"

    @property
    def vocab_size(self) -> int:
        return self.cfg["vocab_size"]

    @property
    def max_seq_len(self) -> int:
        return self.cfg["max_seq_len"]

    def init_weights(self, seed: int) -> None:
        """policy.New's distributions (not its RNG stream): embeddings N(0,1),
        hidden N(0, 1/fan_in), head N(0, 0.1/sqrt(H)), zero biases."""
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            self.embed.weight.normal_(0, 1, generator=g)
            for lin in self.layers:
                if isinstance(lin, MoELayer):
                    lin.experts_weight.normal_(0, 1 / math.sqrt(lin.in_features), generator=g)
                    lin.router_weight.normal_(0, 1 / math.sqrt(lin.in_features), generator=g)
                    lin.experts_bias.zero_()
                    continue
                lin.weight.normal_(0, 1 / math.sqrt(lin.in_features), generator=g)
                lin.bias.zero_()
            self.head.weight.normal_(0, 0.1 / math.sqrt(self.cfg["hidden"]), generator=g)
            self.head.bias.zero_()

    def contexts(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Window ids [P, window] for predicting tokens[p] for each p in positions
        (slot k = tokens[p-1-k], PAD before the start or outside the vocabulary)."""
        W = self.cfg["window"]
        tokens = tokens.long()
        tokens = torch.where((tokens >= 0) & (tokens < self.vocab_size), tokens, torch.full_like(tokens, PAD))
        padded = torch.cat([torch.full((W,), PAD, dtype=torch.long), tokens])
        # tokens[p-1-k] is padded[W + p - 1 - k]
        idx = (W + positions.long() - 1).unsqueeze(1) - torch.arange(W).unsqueeze(0)
        return padded[idx]

    def forward_ctx(self, ctx: torch.Tensor, routes: torch.Tensor | None = None) -> torch.Tensor:
        """Logits [P, V] for window ids ctx [P, window]; for a mixture,
        routes [P, layers, top_k] replays those experts (None: route)."""
        return self.forward_routes(ctx, routes)[0]

    def forward_routes(self, ctx: torch.Tensor, routes: torch.Tensor | None = None):
        """(logits [P, V], routes [P, layers, top_k] or None for a dense model).
        With fake_quant on, the pass runs on served_tensors()."""
        t = self.named_tensors() if self.fake_quant == "none" else self.served_tensors()
        lin = torch.nn.functional.linear
        x = torch.nn.functional.embedding(ctx, t["embed.weight"]).reshape(ctx.shape[0], -1)
        head = (t["head.weight"], t["head.bias"])
        if not self.experts:
            if routes is not None:
                raise ValueError("routes given but the model is dense (experts 0)")
            for l in range(len(self.layers)):
                x = torch.tanh(lin(x, t[f"layers.{l}.weight"], t[f"layers.{l}.bias"]))
            return lin(x, *head), None
        if routes is not None:
            routes = check_routes(routes, ctx.shape[0], len(self.layers), self.cfg["top_k"], self.experts)
        used = []
        for l in range(len(self.layers)):
            x, sel = moe_layer(x, t[f"layers.{l}.experts.weight"], t[f"layers.{l}.router.weight"],
                               t[f"layers.{l}.experts.bias"], self.cfg["top_k"], None if routes is None else routes[:, l])
            used.append(sel)
        return lin(x, *head), torch.stack(used, 1)

    def served_tensors(self) -> dict[str, torch.Tensor]:
        """The weights an engine with engines.quantize = self.fake_quant
        serves (model.Model.Quantized: every tensor BF16, the
        fake_quantized ones INT4), each the forward value of a
        straight-through node whose gradient goes to the float32 master
        unchanged. Dense and mixture alike; routes replay as usual."""
        group = FAKE_QUANT_GROUPS[self.fake_quant]
        return {name: _STE.apply(w, fake_int4(w, group) if fake_quantized(name, w) else bf16(w.detach()))
                for name, w in self.named_tensors().items()}

    def logits_at(self, tokens: torch.Tensor, positions: torch.Tensor, routes=None) -> torch.Tensor:
        """Logits predicting tokens[p] for p in positions. routes (a mixture's
        replay): the sequence's rows [len(tokens), layers, top_k] (or
        [len(tokens), layers*top_k]) in vLLM's layout, row q the routing of the
        pass whose window ends at tokens[q]; tokens[p] is predicted with row
        p-1, as model.Sequence.Routes."""
        ctx = self.contexts(tokens, positions)
        if routes is None:
            return self.forward_ctx(ctx)
        routes = torch.as_tensor(routes).long()
        if routes.shape[0] != len(tokens):
            raise ValueError(f"{routes.shape[0]} route rows for {len(tokens)} tokens")
        return self.forward_ctx(ctx, routes.reshape(len(tokens), -1)[positions.long() - 1])

    def next_logits(self, tokens) -> torch.Tensor:
        """Logits of the token following tokens (model.Model.NextLogits)."""
        t = torch.as_tensor(list(tokens) + [PAD], dtype=torch.long)
        return self.logits_at(t, torch.tensor([len(t) - 1]))[0]

    def routes(self, tokens) -> torch.Tensor:
        """The routes of every position of tokens [len, layers, top_k], row q
        the pass whose window ends at tokens[q] (model.Model.Routes(tokens, 0))."""
        t = torch.as_tensor(list(tokens) + [PAD], dtype=torch.long)
        with torch.no_grad():
            return self.forward_routes(self.contexts(t, torch.arange(1, len(t))))[1]

    # --- checkpoints -------------------------------------------------------

    def named_tensors(self) -> dict[str, torch.Tensor]:
        """Parameters under policy.layout's names, in its fixed order."""
        out = {"embed.weight": self.embed.weight}
        for l, lin in enumerate(self.layers):
            if isinstance(lin, MoELayer):
                out[f"layers.{l}.experts.weight"] = lin.experts_weight
                out[f"layers.{l}.router.weight"] = lin.router_weight
                out[f"layers.{l}.experts.bias"] = lin.experts_bias
                continue
            out[f"layers.{l}.weight"] = lin.weight
            out[f"layers.{l}.bias"] = lin.bias
        out["head.weight"] = self.head.weight
        out["head.bias"] = self.head.bias
        return out

    def load_named(self, tensors: dict[str, torch.Tensor], prefix: str = "") -> None:
        """Copy tensors (names prefixed) into the parameters; shapes must match."""
        with torch.no_grad():
            for name, p in self.named_tensors().items():
                t = tensors.get(prefix + name)
                if t is None:
                    raise ValueError(f"tensor {prefix + name!r} not found")
                if tuple(t.shape) != tuple(p.shape):
                    raise ValueError(f"tensor {prefix + name!r} has shape {list(t.shape)}, config implies {list(p.shape)}")
                p.copy_(t.float())

    def save_serving(self, d: str, metadata: dict[str, str] | None = None) -> None:
        """BF16 model.safetensors + config.json, as model.Model.SaveServing."""
        os.makedirs(d, exist_ok=True)
        md = {"format": "pt", **(metadata or {})}
        ts = self.named_tensors()
        st.save_file(os.path.join(d, "model.safetensors"), ts, {n: "BF16" for n in ts}, md)
        write_config(d, self.cfg, "bfloat16")


def write_config(d: str, cfg: dict, dtype: str) -> None:
    """config.json as Go's writeConfig: model_type, the shape fields, torch_dtype."""
    body = {"model_type": MODEL_TYPE, **{k: cfg[k] for k in CONFIG_FIELDS}}
    if cfg.get("experts", 0):
        body.update({k: cfg[k] for k in MOE_FIELDS})
    body["torch_dtype"] = dtype
    st.atomic_write(os.path.join(d, "config.json"), (json.dumps(body, indent=2) + "\n").encode())


def check_routes(routes: torch.Tensor, rows: int, layers: int, top_k: int, experts: int) -> torch.Tensor:
    """routes as [rows, layers, top_k] long; ValueError (model.ErrRoutes'
    checks) for a wrong shape, an id outside [0, experts) or one listed twice
    in a layer."""
    routes = torch.as_tensor(routes).long()
    if routes.numel() != rows * layers * top_k:
        raise ValueError(f"routes of shape {list(routes.shape)}: want [{rows}, {layers}, {top_k}]")
    routes = routes.reshape(rows, layers, top_k)
    if bool(((routes < 0) | (routes >= experts)).any()):
        raise ValueError(f"route id outside [0, {experts})")
    if top_k > 1 and bool((routes.sort(-1).values.diff(dim=-1) == 0).any()):
        raise ValueError("an expert listed twice in a layer's routes")
    return routes


def read_config(d: str) -> dict:
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    if not isinstance(cfg, dict):
        raise ValueError(f"{d}/config.json is not a JSON object")
    return validate_config(cfg)


def load_serving(d: str) -> WindowMLP:
    """Load a checkpoint Go's SaveServing (or save_serving) wrote: config.json +
    model.safetensors (F32/BF16/F16, or sharded with an index)."""
    m = WindowMLP(read_config(d))
    tensors, _ = st.load_dir(d, as_float32=True)
    m.load_named(tensors)
    return m


def load_hf_causal_lm(path: str):
    """Any Hugging Face causal LM (kind "hf"); needs transformers (guarded)."""
    try:
        from transformers import AutoModelForCausalLM  # type: ignore
    except ImportError as e:  # pragma: no cover - not installed here
        raise RuntimeError("model.kind hf needs the transformers package, which is not importable") from e
    return AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32)  # pragma: no cover
