"""LoRA on the native architectures, in PEFT's layout (issue 29).

The worker trains only the low-rank factors of the adapted projections
(Init model.lora {r, alpha, target_modules, use_rslora}); the base weights
stay frozen. Facts, from source (read at these commits):

  [PL] huggingface/peft src/peft/tuners/lora/layer.py @003369494699fedd543fe38d16e52df96aeae743
       LoraLayer.update_layer: lora_A = nn.Linear(in_features, r), lora_B =
       nn.Linear(r, out_features) (weights [r, in] and [out, r]); scaling =
       lora_alpha / r, or lora_alpha / sqrt(r) with use_rslora;
       reset_lora_parameters (init_lora_weights=True): lora_A
       kaiming_uniform_(a=sqrt(5)) -- U(-1/sqrt(in), 1/sqrt(in)) -- and
       lora_B zeros, so a fresh adapter changes nothing. The layer adds
       scaling * lora_B(lora_A(x)) to the base output.
  [PT] src/peft/tuners/tuners_utils.py @831fd03e04033a49a2523b4012970e1499b7b5c6
       check_target_module_exists: a str target_modules is re.fullmatch'ed
       against the module name; a list matches a name equal to an entry or
       ending in "." + entry.
  [PS] src/peft/utils/save_and_load.py @6b2556e6ff971c85b2b3d919ba7e67d41bf2c813
       get_peft_model_state_dict drops the adapter name, so the saved keys
       are base_model.model.<module>.lora_A.weight / .lora_B.weight
       (PeftModel.base_model = LoraModel, whose .model is the HF model).
  [VH] vllm-project/vllm vllm/lora/peft_helper.py @e745bafffc44744aa601169f8c6f325e47ca7cd5
       what vLLM reads of adapter_config.json: r, lora_alpha, target_modules
       (required), bias, modules_to_save, use_rslora, use_dora.

Which modules may be adapted: the projections the Go engine's
model/transformer adapts (its doc.go, "LoRA adapters") -- attention and MLP
projections of dense layers, of each expert and of DeepSeek's shared
experts (model.fake_quantized's set). A target that matches a router gate,
an embedding or lm_head is refused, and so is one that matches nothing
(PEFT raises for that too). "all-linear" means every such projection
(PEFT's all-linear would also take MoE router gates, which vLLM's and the
engine's adapters do not serve here).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections import OrderedDict

import torch
from torch import nn

from .. import safetensors as st
from .model import fake_quantized

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
PREFIX = "base_model.model."  # [PS]


class LoRAError(ValueError):
    """A LoRA spec or adapter directory that is refused (the message names
    the field, file or tensor)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def projection_modules(specs) -> "OrderedDict[str, tuple[int, int]]":
    """module name -> (out, in) of every projection LoRA may adapt, in HF order."""
    return OrderedDict((n[:-len(".weight")], (shape[0], shape[1])) for n, shape, _ in specs
                       if n.endswith(".weight") and len(shape) == 2 and fake_quantized(n, torch.empty(0, 0)))


def _matches(targets, name: str) -> bool:
    """[PT] check_target_module_exists (no layers_to_transform)."""
    if isinstance(targets, str):
        return re.fullmatch(targets, name) is not None
    return name in targets or any(name.endswith("." + t) for t in targets)


def select_modules(specs, targets) -> list[str]:
    """The modules targets adapts; refuses a target that adapts something
    other than a projection, or nothing at all."""
    proj = projection_modules(specs)
    if targets == "all-linear" or targets == ["all-linear"]:  # the list form: frames from Go ([]string)
        return list(proj)
    if isinstance(targets, list):
        if not targets or not all(isinstance(t, str) and t for t in targets):
            raise LoRAError("model.lora.target_modules", "must be a non-empty list of module names, a regular expression "
                                                         "or \"all-linear\"")
    elif not isinstance(targets, str) or not targets:
        raise LoRAError("model.lora.target_modules", "must be a list of module names, a regular expression or \"all-linear\"")
    else:
        try:
            re.compile(targets)
        except re.error as e:
            raise LoRAError("model.lora.target_modules", f"{targets!r} is not a regular expression: {e}") from None
    modules = {n[:-len(".weight")] for n, _, _ in specs if n.endswith(".weight")}
    if not any(n == "lm_head.weight" for n, _, _ in specs):
        modules.add("lm_head")  # a tied model still has the lm_head module (sharing the embedding)
    hit = [m for m in sorted(modules) if _matches(targets, m)]
    for m in hit:
        if m not in proj:
            what = "a router gate" if m.endswith(".mlp.gate") else "not an attention or MLP projection"
            raise LoRAError("model.lora.target_modules",
                            f"{targets!r} matches {m} ({what}); LoRA adapts q/k/v/o_proj, q_a/q_b_proj, "
                            "kv_a_proj_with_mqa, kv_b_proj and gate/up/down_proj (of the MLP, experts and shared experts)")
    if not hit:
        raise LoRAError("model.lora.target_modules", f"{targets!r} matches no module of the model "
                                                     f"(projections are named like {next(iter(proj))})")
    return [m for m in proj if m in set(hit)]


def target_names(modules: list[str]) -> list[str]:
    """adapter_config.json's target_modules for modules: their last names,
    sorted (what PEFT writes for a list of suffixes)."""
    return sorted({m.rsplit(".", 1)[-1] for m in modules})


class LoRA(nn.Module):
    """The trainable factors of one adapter: for module m, A [r, in] and
    B [out, r] (parameters A.i and B.i, i = m's index in modules)."""

    def __init__(self, modules: list[str], shapes: dict, r: int, alpha: float, use_rslora: bool = False,
                 targets=None):
        super().__init__()
        self.modules_ = list(modules)
        self.r, self.alpha, self.use_rslora = int(r), float(alpha), bool(use_rslora)
        self.targets = targets if targets is not None else target_names(self.modules_)
        self.A = nn.ParameterList([nn.Parameter(torch.zeros(r, shapes[m][1])) for m in self.modules_])
        self.B = nn.ParameterList([nn.Parameter(torch.zeros(shapes[m][0], r)) for m in self.modules_])

    @property
    def scaling(self) -> float:
        """[PL] lora_alpha / r, or lora_alpha / sqrt(r) with use_rslora."""
        return self.alpha / (math.sqrt(self.r) if self.use_rslora else self.r)

    def reset(self, seed: int) -> None:
        """[PL] init_lora_weights=True: A ~ kaiming_uniform(a=sqrt(5)) =
        U(-1/sqrt(in), 1/sqrt(in)), drawn from a generator of seed (one
        stream, modules in HF order); B = 0."""
        g = torch.Generator().manual_seed(int(seed))
        with torch.no_grad():
            for a, b in zip(self.A, self.B):
                bound = 1.0 / math.sqrt(a.shape[1])
                a.copy_(torch.rand(a.shape, generator=g, dtype=torch.float64).mul_(2 * bound).sub_(bound).float())
                b.zero_()

    def apply(self, t: dict) -> dict:
        """t (name -> tensor, the base's, not differentiated) with every
        adapted weight replaced by W + scaling * B @ A (differentiable in A
        and B): the merged form of PEFT's W x + scaling B (A x)."""
        out = dict(t)
        s = self.scaling
        for m, a, b in zip(self.modules_, self.A, self.B):
            w = m + ".weight"
            out[w] = out[w] + s * (b @ a)
        return out

    # --- PEFT's files ------------------------------------------------------------

    def peft_tensors(self) -> "OrderedDict[str, torch.Tensor]":
        """[PS] the adapter_model.safetensors names and tensors."""
        out = OrderedDict()
        for m, a, b in zip(self.modules_, self.A, self.B):
            out[f"{PREFIX}{m}.lora_A.weight"] = a.detach()
            out[f"{PREFIX}{m}.lora_B.weight"] = b.detach()
        return out

    def adapter_config(self, base: str) -> dict:
        """adapter_config.json as PEFT's LoraConfig writes its fields for a
        plain LoRA of a causal LM ([VH]'s fields among them)."""
        return {"alpha_pattern": {}, "base_model_name_or_path": base, "bias": "none", "fan_in_fan_out": False,
                "inference_mode": True, "init_lora_weights": True, "layers_pattern": None,
                "layers_to_transform": None, "lora_alpha": self.alpha, "lora_dropout": 0.0,
                "modules_to_save": None, "peft_type": "LORA", "r": self.r, "rank_pattern": {}, "revision": None,
                "target_modules": self.targets, "task_type": "CAUSAL_LM", "use_dora": False,
                "use_rslora": self.use_rslora}

    def save(self, d: str, base: str, dtype: str = "BF16") -> None:
        """Write adapter_config.json and adapter_model.safetensors (tensors in
        dtype) into the existing directory d."""
        ts = self.peft_tensors()
        st.save_file(os.path.join(d, WEIGHTS_FILE), ts, {n: dtype for n in ts}, {"format": "pt"})
        st.atomic_write(os.path.join(d, CONFIG_FILE),
                        (json.dumps(self.adapter_config(base), indent=2, sort_keys=True) + "\n").encode())

    @classmethod
    def load(cls, d: str, specs) -> "LoRA":
        """Read the PEFT adapter in d for a model of tensor specs: every
        tensor a lora_A/lora_B weight of a projection of the model, with
        shapes fitting it and r; refuses what the engine refuses."""
        cpath, wpath = os.path.join(d, CONFIG_FILE), os.path.join(d, WEIGHTS_FILE)
        try:
            with open(cpath) as f:
                cfg = json.load(f)
            raw, _ = st.load_file(wpath, as_float32=True)
        except (OSError, json.JSONDecodeError, st.SafetensorsError) as e:
            raise LoRAError("resume", f"{d}: {e}") from None
        for k in ("r", "lora_alpha", "target_modules"):
            if k not in cfg:
                raise LoRAError("resume", f"{cpath}: field {k!r} is missing")
        if cfg.get("use_dora") or cfg.get("modules_to_save") or cfg.get("bias", "none") != "none" \
                or cfg.get("rank_pattern") or cfg.get("alpha_pattern"):
            raise LoRAError("resume", f"{cpath}: DoRA, modules_to_save, a LoRA bias and rank/alpha patterns are not supported")
        proj = projection_modules(specs)
        r = int(cfg["r"])
        found: dict[str, dict[str, torch.Tensor]] = {}
        for name, t in raw.items():
            m = re.fullmatch(r"(?:base_model\.model\.)?(.+)\.lora_([AB])\.weight", name)
            if m is None or m.group(1) not in proj:
                raise LoRAError("resume", f"{wpath}: tensor {name!r} is not a lora_A/lora_B weight of a projection of this model")
            out, inn = proj[m.group(1)]
            want = (r, inn) if m.group(2) == "A" else (out, r)
            if tuple(t.shape) != want:
                raise LoRAError("resume", f"{wpath}: tensor {name!r} has shape {list(t.shape)}, want {list(want)}")
            found.setdefault(m.group(1), {})[m.group(2)] = t
        if not found or any(len(v) != 2 for v in found.values()):
            raise LoRAError("resume", f"{wpath}: every adapted module needs lora_A and lora_B (found {sorted(found)})")
        modules = [m for m in proj if m in found]
        lora = cls(modules, proj, r, cfg["lora_alpha"], bool(cfg.get("use_rslora", False)), cfg["target_modules"])
        with torch.no_grad():
            for i, m in enumerate(modules):
                lora.A[i].copy_(found[m]["A"])
                lora.B[i].copy_(found[m]["B"])
        return lora


def parse_spec(o) -> dict:
    """Init's model.lora: {r, alpha, target_modules, use_rslora?}."""
    if not isinstance(o, dict):
        raise LoRAError("model.lora", "must be a map {r, alpha, target_modules[, use_rslora]}")
    for k in o:
        if k not in ("r", "alpha", "target_modules", "use_rslora"):
            raise LoRAError(f"model.lora.{k}", "unknown key")
    for k in ("r", "alpha", "target_modules"):
        if k not in o:
            raise LoRAError(f"model.lora.{k}", "missing")
    r = o["r"]
    if isinstance(r, bool) or not isinstance(r, int) or r < 1:
        raise LoRAError("model.lora.r", f"must be a positive integer rank, got {r!r}")
    a = o["alpha"]
    if isinstance(a, bool) or not isinstance(a, (int, float)) or not math.isfinite(a) or a <= 0:
        raise LoRAError("model.lora.alpha", f"must be a positive number, got {a!r}")
    rs = o.get("use_rslora", False)
    if not isinstance(rs, bool):
        raise LoRAError("model.lora.use_rslora", "must be a bool")
    return {"r": r, "alpha": float(a), "target_modules": o["target_modules"], "use_rslora": rs}


def build(specs, spec: dict, seed: int) -> LoRA:
    """A fresh adapter of spec (parse_spec's) over a model of specs: A
    seeded, B zero."""
    modules = select_modules(specs, spec["target_modules"])
    proj = projection_modules(specs)
    # PEFT writes target_modules as given; all-linear as what it expanded to
    targets = target_names(modules) if spec["target_modules"] in ("all-linear", ["all-linear"]) else spec["target_modules"]
    lora = LoRA(modules, proj, spec["r"], spec["alpha"], spec["use_rslora"], targets)
    lora.reset(seed)
    return lora
