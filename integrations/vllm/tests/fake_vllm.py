"""Fakes of the two vLLM reload APIs and a model whose serving tensors are
derived from its checkpoint tensors, as vLLM's are.

The model ("model format" -> process_weights_after_loading -> "kernel
format") follows vLLM's loader: model.load_weights maps checkpoint names
onto (possibly fused) parameters through each parameter's weight_loader
(shard ids for qkv, expert ids for the fused MoE), then every layer is
processed and the attention layers last
(vllm/model_executor/model_loader/reload/layerwise.py @01424e4b,
_DEFERRED_ATTENTION_TYPES). Processing is a real repack, so a reload that
skips it, or runs it on old values, serves different numbers:

* FoldScaleQKV ("fp8"-like): weight [rows, cols] and a per-row weight_scale
  fold into a transposed kernel weight (weight * scale)^T, as FP8 kernels
  take a transposed weight with the scale applied;
* MLAAttention: W_UK_T is derived from kv_b_proj's weight, as vLLM's MLA
  derives W_UK_T/W_UV from kv_b_proj in process_weights_after_loading;
* FusedMoE: per-expert gate/up/down checkpoint tensors stacked into w13/w2
  and repacked (gate and up rows interleaved, w2 transposed), as fused-MoE
  backends repack.

After processing, the kernel parameters keep a weight_loader that copies
checkpoint-layout data into them (shapes are square on purpose): a plain
load_weights on a processed model succeeds and serves wrong numbers, the
silent failure of issue 30.

NEW_API installs ``vllm.model_executor.model_loader.reload`` with
initialize_layerwise_reload / finalize_layerwise_reload doing what
layerwise.py does (source above; vllm/model_executor/model_loader/reload/
__init__.py @030ea52e exports both): keep each layer's kernel tensors,
restore its model-format parameters (uninitialised: NaN here, garbage
device memory there), count loaded elements through wrapped loaders,
process a layer once all its elements arrived and copy the result into the
kept kernel tensors (same storage), and at finalize put back untouched
layers, process partially loaded ones and process every attention layer.
OLD_API installs a ``vllm`` package without the reload module.
"""

from __future__ import annotations

import contextlib
import sys
import types
import weakref

import torch

# -- model -------------------------------------------------------------------------

H = 8  # hidden size; every repacked matrix is H x H so a misplaced copy fits silently


def _loader_copy(param, loaded, shard=None):
    param.data.copy_(loaded)


class Layer(torch.nn.Module):
    """A vLLM layer: create_weights() registers model-format parameters,
    process() turns them into kernel format (default: nothing to do)."""

    quant_method = None

    def create_weights(self):
        raise NotImplementedError

    def process(self):
        pass

    def _param(self, name, shape, loader=_loader_copy):
        p = torch.nn.Parameter(torch.full(shape, float("nan")), requires_grad=False)
        p.weight_loader = loader
        self.register_parameter(name, p)


class UnquantizedLinearMethod:
    pass


class UnquantizedEmbeddingMethod:
    pass


class Fp8LinearMethod:
    pass


class UnquantizedFusedMoEMethod:
    pass


class Dense(Layer):
    def __init__(self, shape, embedding=False):
        super().__init__()
        self.shape = shape
        self.quant_method = UnquantizedEmbeddingMethod() if embedding else UnquantizedLinearMethod()
        self.create_weights()

    def create_weights(self):
        self._param("weight", self.shape)


class QKV(Layer):
    """Fused q/k/v (rows 4+2+2 = H). quantised: per-row weight_scale folded
    into a transposed kernel weight."""

    SHARDS = {"q": (0, 4), "k": (4, 6), "v": (6, 8)}

    def __init__(self, quantised):
        super().__init__()
        self.quantised = quantised
        self.quant_method = Fp8LinearMethod() if quantised else UnquantizedLinearMethod()
        self.create_weights()

    @staticmethod
    def _load_shard(param, loaded, shard):
        a, b = QKV.SHARDS[shard]
        param.data[a:b].copy_(loaded)

    def create_weights(self):
        self._param("weight", (H, H), self._load_shard)
        if self.quantised:
            self._param("weight_scale", (H,), self._load_shard)

    def process(self):
        if not self.quantised:
            return
        folded = (self.weight.data * self.weight_scale.data[:, None]).t().contiguous()
        self._replace("weight", folded)

    def _replace(self, name, value):
        p = torch.nn.Parameter(value, requires_grad=False)
        p.weight_loader = self._load_shard
        self.register_parameter(name, p)


class FusedMoE(Layer):
    """E experts: checkpoint experts.{e}.{gate,up,down}_proj.weight [H, H]."""

    def __init__(self, experts):
        super().__init__()
        self.experts = experts
        self.quant_method = UnquantizedFusedMoEMethod()
        self.create_weights()

    @staticmethod
    def _load_expert(param, loaded, shard):
        e, part = shard
        if part == "down":
            param.data[e].copy_(loaded)
        else:
            off = 0 if part == "gate" else H
            param.data[e, off:off + H].copy_(loaded)

    def create_weights(self):
        self._param("w13_weight", (self.experts, 2 * H, H), self._load_expert)
        self._param("w2_weight", (self.experts, H, H), self._load_expert)

    def process(self):
        w13 = self.w13_weight.data
        inter = torch.stack([w13[:, :H], w13[:, H:]], dim=2).reshape(self.experts, 2 * H, H)  # gate/up rows interleaved
        for name, value in (("w13_weight", inter), ("w2_weight", self.w2_weight.data.transpose(1, 2).contiguous())):
            p = torch.nn.Parameter(value.clone(), requires_grad=False)
            p.weight_loader = self._load_expert
            self.register_parameter(name, p)


class MLAAttention(torch.nn.Module):
    """Derives W_UK_T from kv_b_proj's weight; holds no checkpoint tensor."""

    def __init__(self, kv_b_proj):
        super().__init__()
        self._kv_b = [kv_b_proj]  # a reference, not a submodule (as vLLM's impl holds it)
        self.register_buffer("W_UK_T", torch.zeros(H, H))

    def process(self):
        self.W_UK_T.copy_(self._kv_b[0].weight.data.t() * 0.5)


class Config:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class FakeModel(torch.nn.Module):
    """kind: "dense" (embed, fused unquantised qkv, o_proj, norm), "fp8"
    (qkv quantised), "mla" (+ kv_b_proj and an MLA attention), "moe" (+ a
    2-expert fused MoE), "full" (all of them)."""

    def __init__(self, kind, trace=None):
        super().__init__()
        self.kind, self.trace = kind, trace if trace is not None else []
        q = kind in ("fp8", "full")
        self.embed_tokens = Dense((16, H), embedding=True)
        self.norm = Dense((H,))
        self.layers = torch.nn.ModuleList([torch.nn.Module()])
        blk = self.layers[0]
        blk.qkv_proj = QKV(q)
        blk.o_proj = Dense((H, H))
        self.names = {"model.embed_tokens.weight": (self.embed_tokens, "weight", None),
                      "model.norm.weight": (self.norm, "weight", None),
                      "model.layers.0.self_attn.o_proj.weight": (blk.o_proj, "weight", None)}
        for s in "qkv":
            self.names[f"model.layers.0.self_attn.{s}_proj.weight"] = (blk.qkv_proj, "weight", s)
            if q:
                self.names[f"model.layers.0.self_attn.{s}_proj.weight_scale"] = (blk.qkv_proj, "weight_scale", s)
        if kind in ("mla", "full"):
            blk.kv_b_proj = Dense((H, H))
            blk.attn = MLAAttention(blk.kv_b_proj)
            self.names["model.layers.0.self_attn.kv_b_proj.weight"] = (blk.kv_b_proj, "weight", None)
        if kind in ("moe", "full"):
            blk.experts = FusedMoE(2)
            for e in range(2):
                for part in ("gate", "up", "down"):
                    self.names[f"model.layers.0.mlp.experts.{e}.{part}_proj.weight"] = (blk.experts, "w13_weight" if part != "down" else "w2_weight", (e, part))

    def checkpoint_specs(self):
        out = {}
        for n, (_, pname, shard) in self.names.items():
            if pname == "weight_scale":
                out[n] = (QKV.SHARDS[shard][1] - QKV.SHARDS[shard][0],)
            elif isinstance(shard, str):
                out[n] = (QKV.SHARDS[shard][1] - QKV.SHARDS[shard][0], H)
            elif isinstance(shard, tuple):
                out[n] = (H, H)
            else:
                out[n] = tuple(getattr(self.names[n][0], "shape"))
        return out

    def load_weights(self, weights):
        """vLLM's load_weights: looks each name's parameter up now (a reload
        may have replaced it) and calls its weight_loader."""
        self.trace.append("load_weights")
        loaded = set()
        for name, w in weights:
            layer, pname, shard = self.names[name]
            p = getattr(layer, pname)
            with torch.no_grad():
                p.weight_loader(p, w.to(torch.float32), shard)
            loaded.add(name)
        return loaded

    def process_weights_after_loading(self):
        """What vLLM's loader runs once after the first load: every layer,
        attention last."""
        for m in self.modules():
            if isinstance(m, Layer):
                m.process()
        for m in self.modules():
            if isinstance(m, MLAAttention):
                m.process()

    def serving_state(self):
        """Every tensor the kernels read, by name."""
        return {n: t.detach().clone() for n, t in list(self.named_parameters()) + list(self.named_buffers())}


def model_config(kind):
    quant = "fp8" if kind in ("fp8", "full") else None
    hf = Config(kv_lora_rank=4 if kind in ("mla", "full") else None)
    return Config(quantization=quant, hf_config=hf, dtype=torch.float32)


def fresh(kind, tensors):
    """A model loaded from `tensors` ({checkpoint name: tensor}) the way vLLM
    loads at start: the reference a reload must reproduce."""
    m = FakeModel(kind)
    m.load_weights(list(tensors.items()))
    m.process_weights_after_loading()
    return m


# -- the layerwise reload hooks ----------------------------------------------------------


class _Info:
    def __init__(self):
        self.kernel = None  # {name: tensor} kept while reloading
        self.loaded = 0
        self.total = 0


_INFO = weakref.WeakKeyDictionary()


def _tensors(layer):
    return {n: t for n, t in list(layer.named_parameters(recurse=False)) + list(layer.named_buffers(recurse=False))}


def _place(layer, kernel):
    for n in list(_tensors(layer)):
        delattr(layer, n)
    for n, t in kernel.items():
        if isinstance(t, torch.nn.Parameter):
            layer.register_parameter(n, t)
        else:
            layer.register_buffer(n, t)


def _process_and_copy_back(layer, info):
    for n, p in layer.named_parameters(recurse=False):
        p.weight_loader = p.weight_loader.__wrapped__ if hasattr(p.weight_loader, "__wrapped__") else p.weight_loader
    layer.process()
    with torch.no_grad():
        for n, t in info.kernel.items():
            t.data.copy_(getattr(layer, n).data)  # same storage: CUDA graphs stay valid
    _place(layer, info.kernel)
    info.kernel = None


def make_hooks(trace):
    def initialize_layerwise_reload(model):
        trace.append("initialize")
        for layer in model.modules():
            if not isinstance(layer, Layer):
                continue
            info = _INFO.setdefault(layer, _Info())
            if info.kernel is not None:
                continue  # already initialised (layerwise.py: info.can_load())
            info.kernel = _tensors(layer)
            for n in list(info.kernel):
                delattr(layer, n)
            layer.create_weights()  # restored model format, uninitialised
            info.loaded = 0
            info.total = sum(p.numel() for p in layer.parameters(recurse=False))
            for n, p in layer.named_parameters(recurse=False):
                p.weight_loader = _counting(layer, info, p.weight_loader)

    def finalize_layerwise_reload(model, model_config):
        trace.append("finalize")
        assert model_config is not None, "finalize_layerwise_reload(model, model_config)"
        for layer in model.modules():
            info = _INFO.get(layer) if isinstance(layer, Layer) else None
            if info is None or info.kernel is None:
                continue
            if info.loaded == 0:
                _place(layer, info.kernel)  # nothing sent: the kernel tensors as they were
                info.kernel = None
            else:
                _process_and_copy_back(layer, info)  # "Delayed processing": the unsent rest is NaN
        for layer in model.modules():
            if isinstance(layer, MLAAttention):
                layer.process()

    return initialize_layerwise_reload, finalize_layerwise_reload


def _counting(layer, info, original):
    def online_process_loader(param, loaded, shard=None):
        original(param, loaded, shard)
        info.loaded += loaded.numel()
        if info.loaded >= info.total:
            _process_and_copy_back(layer, info)

    online_process_loader.__wrapped__ = original
    return online_process_loader


# -- installing the fake vllm package ------------------------------------------------------


@contextlib.contextmanager
def installed(api, trace):
    """Puts a fake ``vllm`` into sys.modules: api "new" with the reload hooks
    and vllm.config.set_current_vllm_config, "old" without either."""
    names = ["vllm", "vllm.config", "vllm.model_executor", "vllm.model_executor.model_loader",
             "vllm.model_executor.model_loader.reload"]
    saved = {n: sys.modules.get(n) for n in names}
    try:
        for n in names:
            sys.modules.pop(n, None)
        pkg = types.ModuleType("vllm")
        pkg.__path__ = []
        sys.modules["vllm"] = pkg
        if api == "new":
            for n in names[1:]:
                m = types.ModuleType(n)
                m.__path__ = []
                sys.modules[n] = m
            init, fin = make_hooks(trace)
            sys.modules["vllm.model_executor.model_loader.reload"].initialize_layerwise_reload = init
            sys.modules["vllm.model_executor.model_loader.reload"].finalize_layerwise_reload = fin

            @contextlib.contextmanager
            def set_current_vllm_config(cfg):
                trace.append("config+")
                try:
                    yield
                finally:
                    trace.append("config-")

            sys.modules["vllm.config"].set_current_vllm_config = set_current_vllm_config
        elif api != "old":
            raise ValueError(api)
        yield
    finally:
        for n, m in saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m
