"""How new weights reach vLLM's live model: the way vLLM itself reloads.

vLLM turns checkpoint tensors into serving ("kernel format") tensors in two
steps: ``model.load_weights`` (fuses qkv/gate_up, slices for tensor
parallelism, "model format") and then ``process_weights_after_loading``
(quantised layers fold scales, pad, transpose or repack for their kernel;
MLA attention derives W_UK_T/W_UV from kv_b_proj; fused-MoE backends
repack the experts). A plain ``load_weights`` into a model that was already
processed writes checkpoint-layout data into kernel-layout tensors and
never re-derives anything: FP8/MXFP4, MLA (DeepSeek/Kimi) and repacked-MoE
models then serve wrong weights, silently.

vLLM's answer is its layerwise reload hooks, in
``vllm.model_executor.model_loader.reload`` (PR #32133; present in the
v0.18.0, v0.19.0 and v0.27.0 API references, e.g. docs.vllm.ai/en/v0.18.0/
api/vllm/model_executor/model_loader/reload/; read at vllm-project/vllm
vllm/model_executor/model_loader/reload/__init__.py @030ea52e and
reload/layerwise.py @01424e4b):

* ``initialize_layerwise_reload(model)``: keeps each layer's current kernel
  tensors, restores the layer's model-format parameters (recorded by
  ``record_metadata_for_reloading``, which ``initialize_model`` in
  model_loader/utils.py calls at construction) and wraps their weight
  loaders;
* ``model.load_weights(weights=...)``: as usual; a layer whose elements are
  all loaded is processed (``quant_method.process_weights_after_loading``)
  and copied back into the kept kernel tensors (same storage: CUDA graphs
  stay valid);
* ``finalize_layerwise_reload(model, model_config)``: puts back the kernel
  tensors of layers that received nothing, processes partially loaded ones,
  then runs ``process_weights_after_loading`` on every Attention/MLA layer.

The same three calls, in this order, are what vLLM's checkpoint-format
weight-transfer engines do (vllm/distributed/weight_transfer/ipc_engine.py:
``start_weight_update`` -> initialize, ``finish_weight_update`` -> finalize
with ``self.model_config``) and what SkyRL does around its chunks
(NovaSky-AI/SkyRL skyrl/backends/skyrl_train/inference_servers/
layerwise_reload.py @020ec92b, ``LayerwiseReloadWorkerMixin``: both hooks
under ``set_current_vllm_config(self.vllm_config)`` and
``torch.device(self.device)``).

Two consequences shape this module:

* A layer that receives only some of its elements is processed with the
  rest uninitialised (layerwise.py "Delayed processing"; the reload
  package's documented limitation). A delta that changed q_proj but not
  k_proj would corrupt the fused qkv. So with the hooks every checkpoint
  tensor of a touched reload unit (see ``reload_unit``) is sent again.
* We call the hooks ourselves rather than a weight-transfer engine's
  ``start/finish_weight_update``: those need ``--weight-transfer-config``
  and are no-ops for in-place engines (base.py WeightTransferEngine
  docstring @02f250b0), which would silently skip the processing. The
  worker-native session (vLLM >= 0.22, PR #39212; SkyRL's note in the file
  above) is respected: while it is active we refuse, since our finalize
  would finalise the trainer's half-sent update.

Without the hooks (older vLLM) plain ``load_weights`` is used only when the
served model has nothing to re-process: no quantisation, no MLA, no fused
MoE. Otherwise the call is refused before anything is touched, naming the
release that has the hooks.
"""

from __future__ import annotations

import contextlib
import importlib
from dataclasses import dataclass
from typing import Callable, Iterable, List, Optional, Sequence, Tuple

from .state import StateError

RELOAD_MODULE = "vllm.model_executor.model_loader.reload"

# The first release whose API reference shows the reload hooks
# (docs.vllm.ai/en/v0.18.0/api/vllm/model_executor/model_loader/reload/);
# the PR (#32133) was merged 2026-01-30, so a release before 0.18.0 may
# have them too: detection is by import, this is only named in the refusal.
MIN_RELOAD_HOOKS_RELEASE = "0.18.0"


class ReloadUnsupportedError(StateError):
    """This vLLM cannot reload the served model correctly; nothing was touched."""


@dataclass(frozen=True)
class Hooks:
    initialize: Callable  # initialize_layerwise_reload(model)
    finalize: Callable  # finalize_layerwise_reload(model, model_config)


def find_hooks() -> Optional[Hooks]:
    """vLLM's layerwise reload hooks, or None when this vLLM (or no vLLM)
    lacks them. Feature detection by import, never by version string."""
    try:
        mod = importlib.import_module(RELOAD_MODULE)
    except ImportError:
        return None
    init = getattr(mod, "initialize_layerwise_reload", None)
    fin = getattr(mod, "finalize_layerwise_reload", None)
    if not callable(init) or not callable(fin):
        return None
    return Hooks(init, fin)


# -- what plain load_weights cannot reload ------------------------------------

# Class names (anywhere in a module's MRO) whose layers derive kernel tensors
# in process_weights_after_loading. vLLM's own reload treats Attention and
# MLAAttention specially for this reason (layerwise.py
# _DEFERRED_ATTENTION_TYPES); FusedMoE backends repack the expert weights.
_MLA_CLASSES = ("MLAAttention",)
_MOE_CLASSES = ("FusedMoE",)


def _class_names(obj) -> List[str]:
    return [c.__name__ for c in type(obj).__mro__]


def plain_reload_blockers(model, model_config) -> List[str]:
    """Why plain ``load_weights`` would leave this model's served tensors
    wrong: a list of reasons, empty for a plain dense unquantised model.

    Signals (any one blocks):
    * ``model_config.quantization`` set (vLLM sets it from the checkpoint's
      quantization_config or --quantization);
    * a layer whose ``quant_method`` is not one of vLLM's Unquantized*
      methods (UnquantizedLinearMethod, UnquantizedEmbeddingMethod, ...);
    * an MLA attention layer, or an MLA config (``kv_lora_rank``, as in
      transformers' DeepseekV3Config, configuration_deepseek_v3.py @001f85b3;
      Kimi K2 uses the same config);
    * a fused-MoE layer.
    """
    reasons: List[str] = []
    q = getattr(model_config, "quantization", None)
    if q:
        reasons.append(f"quantised (model_config.quantization={q!r})")
    hf = getattr(model_config, "hf_config", None)
    if getattr(hf, "kv_lora_rank", None):
        reasons.append(f"MLA attention (hf_config.kv_lora_rank={hf.kv_lora_rank})")
    quant_layers, mla_layers, moe_layers = [], [], []
    for name, mod in model.named_modules():
        qm = getattr(mod, "quant_method", None)
        if qm is not None and not type(qm).__name__.startswith("Unquantized"):
            quant_layers.append(f"{name} ({type(qm).__name__})")
        names = _class_names(mod)
        if any(c in names for c in _MLA_CLASSES):
            mla_layers.append(name)
        if any(c in names for c in _MOE_CLASSES):
            moe_layers.append(name)
    if quant_layers:
        reasons.append(f"quantised layers: {_few(quant_layers)}")
    if mla_layers:
        reasons.append(f"MLA attention layers: {_few(mla_layers)}")
    if moe_layers:
        reasons.append(f"fused-MoE layers (experts repacked after loading): {_few(moe_layers)}")
    return reasons


def _few(xs: Sequence[str], n: int = 3) -> str:
    return ", ".join(xs[:n]) + (f" and {len(xs) - n} more" if len(xs) > n else "")


# -- reload units --------------------------------------------------------------


def reload_unit(name: str) -> str:
    """The group of checkpoint tensors that must be sent together for the
    layerwise hooks to see whole layers: everything up to and including the
    first numeric path component (a decoder block, "model.layers.7": its
    fused qkv, gate_up, MLA projections and all experts of its fused MoE),
    else the tensor's module ("model.embed_tokens", "lm_head")."""
    parts = name.split(".")
    for i, p in enumerate(parts[:-1]):
        if p.isdigit():
            return ".".join(parts[: i + 1])
    return ".".join(parts[:-1])


def expand_to_units(changed: Iterable[str], all_names: Iterable[str]) -> List[str]:
    """Every name of all_names (in its order) in a reload unit of a changed name."""
    units = {reload_unit(n) for n in changed}
    return [n for n in all_names if reload_unit(n) in units]


# -- the reloader --------------------------------------------------------------


class Reloader:
    """Loads (name, tensor) pairs into the live model by one of two paths:

    * "layerwise": initialize hooks -> model.load_weights -> finalize hooks;
    * "plain": model.load_weights only (a model with nothing to re-process).
    """

    def __init__(self, mode: str, model, model_config=None, hooks: Optional[Hooks] = None,
                 context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext) -> None:
        if mode not in ("layerwise", "plain"):
            raise ValueError(mode)
        if mode == "layerwise" and hooks is None:
            raise ValueError("layerwise reload needs the hooks")
        self.mode, self.model, self.model_config, self.hooks, self._context = mode, model, model_config, hooks, context

    def load(self, weights: Iterable[Tuple[str, object]]) -> None:
        if self.mode == "plain":
            self.model.load_weights(weights=weights)
            return
        with self._context():
            self.hooks.initialize(self.model)
            try:
                self.model.load_weights(weights=weights)
            except BaseException:
                # Put the kernel tensors of untouched layers back so the
                # engine is not left with layers restored to model format;
                # the caller marks the weights half-updated either way.
                with contextlib.suppress(Exception):
                    self.hooks.finalize(self.model, self.model_config)
                raise
            self.hooks.finalize(self.model, self.model_config)

    def resend(self, changed: List[str], all_names: List[str]) -> List[str]:
        """The names to hand to load() when `changed` tensors changed."""
        if self.mode == "plain":
            return list(changed)
        return expand_to_units(changed, all_names)


def select_reloader(model, model_config=None, vllm_config=None, device=None,
                    native_update_active: bool = False, hooks: Optional[Hooks] = None) -> Reloader:
    """The reloader for this worker, or ReloadUnsupportedError (nothing touched).

    hooks: for tests; by default found by importing vLLM's reload package."""
    if native_update_active:
        raise ReloadUnsupportedError(
            "a vLLM weight update (start_weight_update) is in progress on this worker; "
            "finish it with finish_weight_update before asyncrl loads weights, or the two would finalise each other's layers")
    hooks = hooks if hooks is not None else find_hooks()
    if hooks is not None:
        return Reloader("layerwise", model, model_config, hooks, lambda: _vllm_context(vllm_config, device))
    blockers = plain_reload_blockers(model, model_config)
    if blockers:
        raise ReloadUnsupportedError(
            f"this vLLM has no layerwise reload hooks ({RELOAD_MODULE}.initialize_layerwise_reload / "
            f"finalize_layerwise_reload) and the served model is {'; '.join(blockers)}: a plain model.load_weights "
            "would leave what process_weights_after_loading derived (quantised scales and layouts, MLA W_UK/W_UV, "
            f"repacked experts) from the old weights and serve wrong weights; upgrade vLLM to {MIN_RELOAD_HOOKS_RELEASE} "
            "or newer, or serve a dense unquantised checkpoint. Nothing was loaded")
    return Reloader("plain", model, model_config)


def _vllm_context(vllm_config, device) -> contextlib.AbstractContextManager:
    """set_current_vllm_config(vllm_config) and torch.device(device), as SkyRL
    wraps the hooks: process_weights_after_loading may read the current vLLM
    config (FlashInfer MoE kernels) and materialises on the default device."""
    stack = contextlib.ExitStack()
    if vllm_config is not None:
        try:
            from vllm.config import set_current_vllm_config  # type: ignore
        except ImportError:
            set_current_vllm_config = None
        if set_current_vllm_config is not None:
            stack.enter_context(set_current_vllm_config(vllm_config))
    if device is not None:
        import torch

        dev = device if isinstance(device, torch.device) else torch.device(device)
        if hasattr(dev, "__enter__"):  # torch >= 2.0, as every vLLM with the hooks has
            stack.enter_context(dev)
    return stack
