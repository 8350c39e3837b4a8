"""The frame loop: Init, TrainBatch, SaveCheckpoint, Shutdown, and Tinker's
ForwardBackward and OptimStep (docs/protocol.md,
worker bridge frames v1).

Nothing is half-applied: every field of a request is validated before the
model is touched; a failure during the step (non-finite loss or gradient, an
exception, a checkpoint that cannot be written) zeroes the gradients, puts the
previous weights and optimiser state back and answers Error{internal}.
"""

from __future__ import annotations

import copy
import logging
import math
import os
import re
import shutil
import tempfile
import time
import traceback
from dataclasses import dataclass

import numpy as np
import torch

from . import model as mdl
from . import safetensors as st
from .hf import checkpoint as hfcheckpoint
from .hf import config as hfconfig
from .hf import lora as hflora
from .hf.policy import NativeHFPolicy
from .frames import EOF, PROTOCOL_VERSION, FrameError, error_frame, parse_tensor, read_frame, write_frame
from . import group as grp
from . import shards
from . import tinker
from . import vocab
from .loss import LossConfig, cross_entropy_loss, grpo_advantages, sequence_weights, token_loss

log = logging.getLogger("asyncrl_worker")

WORKER_NAME = "asyncrl_worker"
OPTIMIZER_FILE = "optimizer.pt"
SERVING_DIR = "v{:08d}"
STATE_DIR = "state-v{:08d}"
ADAPTER_DIR = "adapter-v{:08d}"  # a LoRA run's PEFT adapter of the version


def bad(field: str, message: str) -> FrameError:
    return FrameError("bad_field", field, message)


def _check_keys(obj, allowed: set[str], where: str, required=()) -> dict:
    """Reject unknown keys, then missing required ones (in the order given)."""
    if not isinstance(obj, dict):
        raise bad(where, "must be a map")
    for k in obj:
        if k not in allowed:
            raise bad(f"{where}.{k}" if where else k, "unknown key")
    for k in required:
        if k not in obj:
            raise bad(f"{where}.{k}" if where else k, "missing")
    return obj


def _int(v, field: str, lo: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise bad(field, f"must be an integer, got {v!r}")
    if lo is not None and v < lo:
        raise bad(field, f"must be >= {lo}, got {v}")
    return v


def _float(v, field: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise bad(field, f"must be a finite number, got {v!r}")
    return float(v)


@dataclass
class OptimConfig:
    lr: float = 3e-3
    # step k (1-based) uses lr * min(1, k / warmup_steps); 0 = none
    # (model.TrainerConfig.LRAt)
    warmup_steps: int = 0
    betas: tuple = (0.9, 0.99)
    eps: float = 1e-8
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0


def lr_at(c: OptimConfig, k: int) -> float:
    """The learning rate of optimiser step k (1-based): lr after the
    warm-up, lr * k / warmup_steps during it (model.TrainerConfig.LRAt)."""
    if c.warmup_steps > 0 and k < c.warmup_steps:
        return c.lr * max(k, 1) / c.warmup_steps
    return c.lr


def parse_optimizer(o) -> OptimConfig:
    _check_keys(o, {"name", "lr", "warmup_steps", "betas", "eps", "weight_decay", "max_grad_norm"}, "optimizer", ("name",))
    if o["name"] != "adamw":
        raise bad("optimizer.name", f"only adamw is supported, got {o['name']!r}")
    c = OptimConfig()
    if "lr" in o:
        c.lr = _float(o["lr"], "optimizer.lr")
    if "warmup_steps" in o:
        w = o["warmup_steps"]
        if isinstance(w, bool) or not isinstance(w, int) or w < 0:
            raise bad("optimizer.warmup_steps", f"must be an integer >= 0, got {w!r}")
        c.warmup_steps = w
    if "betas" in o:
        b = o["betas"]
        if not isinstance(b, list) or len(b) != 2:
            raise bad("optimizer.betas", "must be [beta1, beta2]")
        c.betas = (_float(b[0], "optimizer.betas[0]"), _float(b[1], "optimizer.betas[1]"))
    for k in ("eps", "weight_decay", "max_grad_norm"):
        if k in o:
            setattr(c, k, _float(o[k], f"optimizer.{k}"))
    # model.TrainerConfig.Validate's rules
    if not c.lr > 0:
        raise bad("optimizer.lr", f"must be > 0, got {c.lr}")
    for i, b in enumerate(c.betas):
        if not 0 <= b < 1:
            raise bad(f"optimizer.betas[{i}]", f"must be in [0, 1), got {b}")
    if not c.eps > 0:
        raise bad("optimizer.eps", f"must be > 0, got {c.eps}")
    if c.weight_decay < 0:
        raise bad("optimizer.weight_decay", f"must be >= 0, got {c.weight_decay}")
    if c.max_grad_norm < 0:
        raise bad("optimizer.max_grad_norm", f"must be >= 0 (0 = off), got {c.max_grad_norm}")
    return c


@dataclass
class AdvConfig:
    estimator: str = "grpo"
    norm_adv_by_std: bool = True
    epsilon: float = 1e-6


def parse_loss(o) -> tuple[LossConfig, AdvConfig]:
    allowed = LossConfig.keys() | {"advantage", "fake_quant"}
    _check_keys(o, allowed, "loss")
    cfg = LossConfig()
    for k, v in o.items():
        if k in ("advantage", "fake_quant"):  # fake_quant: Worker.init
            continue
        if k == "tis_ratio_type" and v is None:
            v = "none"
        setattr(cfg, k, v)
    try:
        cfg.validate()
    except ValueError as e:
        field, msg = e.args if len(e.args) == 2 else ("", str(e))
        raise bad(f"loss.{field}", msg) from None
    adv = AdvConfig()
    if "advantage" in o:
        a = _check_keys(o["advantage"], {"estimator", "norm_adv_by_std", "epsilon"}, "loss.advantage")
        if a.get("estimator", "grpo") != "grpo":
            raise bad("loss.advantage.estimator", f"only grpo is supported, got {a['estimator']!r}")
        if "norm_adv_by_std" in a:
            if not isinstance(a["norm_adv_by_std"], bool):
                raise bad("loss.advantage.norm_adv_by_std", "must be a bool")
            adv.norm_adv_by_std = a["norm_adv_by_std"]
        if "epsilon" in a:
            adv.epsilon = _float(a["epsilon"], "loss.advantage.epsilon")
            if adv.epsilon < 0:
                raise bad("loss.advantage.epsilon", "must be >= 0")
    return cfg, adv


class BuiltinPolicy:
    """asyncrl's windowed MLP (model.WindowMLP)."""

    kind = "builtin"

    def __init__(self, net: mdl.WindowMLP):
        self.net = net

    @property
    def vocab_size(self):
        return self.net.vocab_size

    @property
    def max_seq_len(self):
        return self.net.max_seq_len

    def parameters(self):
        return list(self.net.parameters())

    def logits_at(self, tokens: torch.Tensor, positions: torch.Tensor, routes=None) -> torch.Tensor:
        """routes: a mixture's replayed rows for the sequence (model.WindowMLP.logits_at)."""
        return self.net.logits_at(tokens, positions, routes)

    def logits_many(self, seqs, positions, routes=None) -> torch.Tensor:
        """logits_at of every sequence, concatenated (the window MLP has no
        cross-position state, so a loop is as fast as a batch)."""
        return torch.cat([self.net.logits_at(s, p, None if routes is None else routes[i])
                          for i, (s, p) in enumerate(zip(seqs, positions))])

    def route_shape(self):
        """(layers, top_k, experts) of a mixture-of-experts net, None for a
        dense one: what arrays.routes of a TrainBatch must match (R3)."""
        e = getattr(self.net, "experts", 0)
        return (len(self.net.layers), self.net.cfg["top_k"], e) if e else None

    def save_serving(self, d: str, step: int) -> None:
        self.net.save_serving(d, {"version": str(step)})

    def save_weights_f32(self, d: str) -> None:
        ts = self.net.named_tensors()
        st.save_file(os.path.join(d, "model.safetensors"), ts, {n: "F32" for n in ts}, {"format": "pt"})
        mdl.write_config(d, self.net.cfg, "float32")


class HFPolicy:  # pragma: no cover - needs transformers, not installed in asyncrl's CI
    """A Hugging Face causal LM of a model_type the native implementations
    (asyncrl_worker.hf) do not cover, through transformers when it is
    importable (model.kind "hf" fallback; untested here)."""

    kind = "hf"

    def __init__(self, path: str):
        self.net = mdl.load_hf_causal_lm(path)
        cfg = self.net.config
        self.vocab_size = cfg.vocab_size
        self.max_seq_len = getattr(cfg, "max_position_embeddings", 1 << 24)

    def parameters(self):
        return [p for p in self.net.parameters() if p.requires_grad]

    def logits_at(self, tokens, positions, routes=None):
        out = self.net(input_ids=tokens.long().unsqueeze(0)).logits[0]
        return out[positions.long() - 1]

    def logits_many(self, seqs, positions, routes=None):
        return torch.cat([self.logits_at(s, p) for s, p in zip(seqs, positions)])

    def route_shape(self):
        return None  # no route replay for hf models: arrays.routes is refused

    def save_serving(self, d, step):
        bf = copy.deepcopy(self.net).to(torch.bfloat16)
        bf.save_pretrained(d, safe_serialization=True)

    def save_weights_f32(self, d):
        self.net.save_pretrained(d, safe_serialization=True)


def _load_hf(path: str | None, config, field: str):
    """kind hf: the native implementation when config.json's model_type is
    one of asyncrl_worker.hf's architectures, else transformers (when it is
    importable). Every check runs before the model exists."""
    if config is not None:
        raise bad("model.config", "kind hf reads the architecture from model.path's config.json; leave model.config out")
    if not path:
        raise bad("model.path", "kind hf needs an HF checkpoint directory (config.json + model.safetensors)")
    try:
        mt = hfconfig.model_type_of(hfconfig.read_config(path))
    except hfconfig.ConfigError as e:
        raise bad(field, str(e)) from None
    if mt in hfconfig.ARCHITECTURES:
        try:
            return NativeHFPolicy.load(path)
        except (hfcheckpoint.CheckpointError, hfconfig.ConfigError) as e:
            raise bad(field, str(e)) from None
    try:  # pragma: no cover - transformers is not installed in asyncrl's CI
        return HFPolicy(path)
    except RuntimeError as e:
        raise bad(field, f"{path}/config.json: model_type {mt!r} is not one of the native architectures "
                         f"({', '.join(hfconfig.ARCHITECTURES)}) and the transformers fallback failed: {e}") from None


def _attach_lora(policy, spec: dict, resume: str | None, path: str | None, seed: int) -> None:
    """Make policy train a LoRA adapter of spec (Init model.lora) instead of
    its weights: a fresh one (A seeded, B zero, as PEFT), or the resume
    state's, which must be the one spec describes."""
    if not isinstance(policy, NativeHFPolicy):
        raise bad("model.lora", "LoRA needs a native architecture "
                                f"({', '.join(hfconfig.ARCHITECTURES)}); model.path's is not one")
    specs = policy.net.specs
    try:
        fresh = hflora.build(specs, spec, seed)
        adapter = fresh
        if resume:
            adapter = hflora.LoRA.load(resume, specs)
            same = (adapter.r == fresh.r and adapter.alpha == fresh.alpha and adapter.use_rslora == fresh.use_rslora
                    and adapter.modules_ == fresh.modules_)
            if not same:
                raise hflora.LoRAError("model.lora", f"the resume state {resume} holds an adapter of r {adapter.r}, "
                                                     f"alpha {adapter.alpha} over {len(adapter.modules_)} modules; "
                                                     f"Init asks for r {fresh.r}, alpha {fresh.alpha} over "
                                                     f"{len(fresh.modules_)}")
    except hflora.LoRAError as e:
        raise bad(e.field, str(e)) from None
    policy.attach_lora(adapter, path)


def _load_builtin(path: str | None, config: dict | None, seed: int, field: str) -> BuiltinPolicy:
    if path:
        try:
            net = mdl.load_serving(path)
        except (OSError, ValueError) as e:
            raise bad(field, f"cannot load the checkpoint in {path}: {e}") from None
        if config is not None:
            try:
                want = mdl.validate_config(config)
            except ValueError as e:
                raise bad("model.config", str(e)) from None
            if want != net.cfg:
                raise bad("model.config", f"{want} disagrees with {path}/config.json {net.cfg}")
        return BuiltinPolicy(net)
    if config is None:
        raise bad("model.path", "neither a checkpoint path nor a config to initialise from")
    try:
        net = mdl.WindowMLP(config)
    except ValueError as e:
        raise bad("model.config", str(e)) from None
    net.init_weights(seed)
    return BuiltinPolicy(net)


@dataclass
class Batch:
    tokens: torch.Tensor  # int64 [T]
    offsets: list[int]  # [S+1]
    mask: np.ndarray  # uint8 [T]
    rollout: torch.Tensor  # float64 [T]
    advantages: torch.Tensor  # float64 [S]
    groups: list[str]
    micro: list[list[int]]
    seq_tokens: list[int]  # trained tokens per sequence
    versions: np.ndarray | None = None  # int64 [T]: policy version that generated each token
    loss: str = ""  # "" = the Init's policy loss; "cross_entropy" = SFT's NLL
    # optional replay arrays (frames v1, issue 19): routes int32 [T, L, K]
    # (row p = the forward pass whose input ends at token p) and support
    # int32 [T, K] (-1 padding)
    routes: torch.Tensor | None = None
    support: torch.Tensor | None = None
    # rank of each microbatch (TrainBatch.microbatch_ranks; all 0 in a world of one)
    micro_ranks: list[int] | None = None


class Worker:
    def __init__(self):
        self.policy = None
        self.opt = None
        self.optim_cfg: OptimConfig | None = None
        self.loss_cfg: LossConfig | None = None
        self.adv_cfg: AdvConfig | None = None
        self.step = 0
        self.out_dir = ""
        self.done = False
        # the data-parallel group this rank belongs to (Init.group; a world
        # of one without it): asyncrl_worker.group
        self.group = grp.Group()

    # --- dispatch ------------------------------------------------------------

    def handle(self, req: dict) -> dict:
        rid = req.get("id", 0)
        if isinstance(rid, bool) or not isinstance(rid, int) or rid < 0:
            return error_frame(0, "bad_field", "id", f"id must be an unsigned integer, got {rid!r}")
        try:
            if "v" not in req:
                raise bad("v", "missing protocol version")
            if req["v"] != PROTOCOL_VERSION:
                raise FrameError("unsupported_version", "v", f"protocol version {req['v']!r}; this worker speaks {PROTOCOL_VERSION}")
            typ = req.get("type")
            fn = {"Init": self.init, "TrainBatch": self.train_batch, "SaveCheckpoint": self.save_checkpoint,
                  "Shutdown": self.shutdown, "ForwardBackward": self.forward_backward,
                  "OptimStep": self.optim_step}.get(typ)
            if fn is None:
                raise bad("type", f"unknown request type {typ!r}")
            reply = fn(req)
            reply.update({"v": PROTOCOL_VERSION, "id": rid})
            return reply
        except FrameError as e:
            return error_frame(rid, e.code, e.field, e.message)
        except Exception as e:  # anything unexpected: internal, nothing applied
            log.error("internal error:\n%s", traceback.format_exc())
            return error_frame(rid, "internal", "", f"{type(e).__name__}: {e}")

    # --- Init ------------------------------------------------------------------

    def init(self, req: dict) -> dict:
        _check_keys(req, {"v", "type", "id", "model", "optimizer", "loss", "seed", "resume", "step", "out_dir", "group"}, "",
                    ("model", "optimizer", "loss", "out_dir"))
        m = _check_keys(req["model"], {"kind", "path", "config", "lora"}, "model", ("kind",))
        kind = m["kind"]
        if kind not in ("builtin", "hf"):
            raise bad("model.kind", f"must be builtin or hf, got {kind!r}")
        path, config = m.get("path"), m.get("config")
        if path is not None and not isinstance(path, str):
            raise bad("model.path", "must be a directory path")
        lora_spec = None
        if m.get("lora") is not None:
            if kind != "hf":
                raise bad("model.lora", "LoRA needs model kind hf (a native architecture: "
                                        f"{', '.join(hfconfig.ARCHITECTURES)})")
            try:
                lora_spec = hflora.parse_spec(m["lora"])
            except hflora.LoRAError as e:
                raise bad(e.field, str(e)) from None
        if config is not None and not isinstance(config, dict):
            raise bad("model.config", "must be a map (config.json contents)")
        optim_cfg = parse_optimizer(req["optimizer"])
        loss_cfg, adv_cfg = parse_loss(req["loss"])
        seed = _int(req.get("seed", 0), "seed")
        step = _int(req.get("step", 0), "step", 0)
        resume = req.get("resume")
        if resume is not None and (not isinstance(resume, str) or not resume):
            raise bad("resume", "must be a directory path or null")
        out_dir = req["out_dir"]
        if not isinstance(out_dir, str) or not out_dir:
            raise bad("out_dir", "must be a directory path")
        group = grp.parse_group(req.get("group"))

        torch.manual_seed(seed)
        np.random.seed(seed % (1 << 32))
        saved = None
        if resume and shards.is_sharded(resume):
            # a group's state (asyncrl_worker.shards): any world size resumes it
            saved = shards.read(resume, group.rank)
        elif resume:
            opt_path = os.path.join(resume, OPTIMIZER_FILE)
            try:
                saved = torch.load(opt_path, map_location="cpu")
            except (OSError, RuntimeError, EOFError) as e:
                raise bad("resume", f"cannot read {opt_path}: {e}") from None
        if saved is not None:
            if saved.get("step") != step:
                raise bad("step", f"step {step} but the resume state {resume} is at step {saved.get('step')}")
            if saved.get("kind", "builtin") != kind:
                raise bad("model.kind", f"{kind} but the resume state holds a {saved.get('kind')} model")
            if bool(saved.get("lora")) != (lora_spec is not None):
                raise bad("model.lora", "the resume state was trained " + ("with" if saved.get("lora") else "without")
                          + " a LoRA adapter; Init must say the same")
        if kind == "hf":
            policy = _load_hf(resume or path, config, "resume" if resume else "model.path")
        else:
            policy = _load_builtin(resume or path, config, seed, "resume" if resume else "model.path")
        if lora_spec is not None:
            _attach_lora(policy, lora_spec, resume, path, seed)
        try:
            os.makedirs(out_dir, exist_ok=True)
        except OSError as e:
            raise bad("out_dir", f"cannot create {out_dir}: {e}") from None
        # a child killed mid-write leaves its temporary directories behind
        for name in os.listdir(out_dir):
            if re.fullmatch(r"\.(state-|adapter-)?v\d{8}\.tmp-.*", name):
                shutil.rmtree(os.path.join(out_dir, name), ignore_errors=True)
        opt = torch.optim.AdamW(policy.parameters(), lr=optim_cfg.lr, betas=optim_cfg.betas,
                                eps=optim_cfg.eps, weight_decay=optim_cfg.weight_decay)
        if saved is not None:
            try:
                opt.load_state_dict(saved["optimizer"])
            except (KeyError, ValueError) as e:
                raise bad("resume", f"optimizer state does not fit the model: {e}") from None
            for g in opt.param_groups:  # this Init's hyper-parameters win
                g.update(lr=optim_cfg.lr, betas=optim_cfg.betas, eps=optim_cfg.eps, weight_decay=optim_cfg.weight_decay)
            if "torch_rng" in saved:
                torch.set_rng_state(saved["torch_rng"])
        fq = req["loss"].get("fake_quant", "none")
        if fq not in mdl.FAKE_QUANT_GROUPS:
            raise bad("loss.fake_quant", f"must be one of {', '.join(mdl.FAKE_QUANT_GROUPS)}, got {fq!r}")
        if fq != "none":
            if not isinstance(policy, (BuiltinPolicy, NativeHFPolicy)):
                raise bad("loss.fake_quant", "fake quantisation needs the built-in model or a native HF architecture "
                                             f"({', '.join(hfconfig.ARCHITECTURES)})")
            policy.net.fake_quant = fq
        # last: every field is valid and the model loaded, so a rank that
        # cannot train never holds the others in the rendezvous
        grp.join(group, cuda=False)
        grp.broadcast_params(group, policy.parameters())
        self.group = group
        self.policy, self.opt = policy, opt
        self.optim_cfg, self.loss_cfg, self.adv_cfg = optim_cfg, loss_cfg, adv_cfg
        self.step, self.out_dir = step, out_dir
        log.info("init: %s model, step %d, out_dir %s, rank %d of %d", kind, step, out_dir, group.rank, group.world)
        return {"type": "Ready", "step": step,
                "worker": {"name": WORKER_NAME, "protocol": PROTOCOL_VERSION, "torch": torch.__version__}}

    # --- TrainBatch ------------------------------------------------------------

    def _need_init(self):
        if self.policy is None:
            raise bad("type", "no Init yet")

    def parse_batch(self, req: dict) -> Batch:
        """Validate a TrainBatch completely; raises FrameError(bad_field)."""
        _check_keys(req, {"v", "type", "id", "step", "arrays", "groups", "microbatches", "microbatch_ranks", "loss"}, "",
                    ("step", "arrays"))
        step = _int(req["step"], "step")
        if step != self.step + 1:
            raise bad("step", f"step {step} but the weights are at version {self.step} (expected {self.step + 1})")
        # optional field of frames v1: absent = the Init's policy loss
        loss = req.get("loss", "")
        if loss not in ("", "cross_entropy"):
            raise bad("loss", f"must be absent (the Init's policy loss) or 'cross_entropy', got {loss!r}")
        ce = loss == "cross_entropy"
        arr = _check_keys(req["arrays"], {"tokens", "seq_offsets", "loss_mask", "rollout_logprobs", "versions",
                                          "advantages", "rewards", "routes", "support"}, "arrays",
                          ("tokens", "seq_offsets", "loss_mask") if ce else
                          ("tokens", "seq_offsets", "loss_mask", "rollout_logprobs", "versions"))
        tokens = parse_tensor(arr["tokens"], "arrays.tokens", "int32", 1)
        off = parse_tensor(arr["seq_offsets"], "arrays.seq_offsets", "int64", 1)
        mask = parse_tensor(arr["loss_mask"], "arrays.loss_mask", "uint8", 1)
        T = len(tokens)
        # a supervised step reads no rollout logprobs or versions
        roll = (parse_tensor(arr["rollout_logprobs"], "arrays.rollout_logprobs", "float32", 1)
                if "rollout_logprobs" in arr else np.zeros(T, dtype=np.float32))
        vers = (parse_tensor(arr["versions"], "arrays.versions", "int64", 1)
                if "versions" in arr else np.full(T, -1, dtype=np.int64))
        for name, a in (("loss_mask", mask), ("rollout_logprobs", roll), ("versions", vers)):
            if len(a) != T:
                raise bad(f"arrays.{name}", f"{len(a)} values but tokens has {T}")
        if len(off) < 2:
            raise bad("arrays.seq_offsets", f"needs at least 2 entries (one sequence), got {len(off)}")
        S = len(off) - 1
        if off[0] != 0 or off[-1] != T:
            raise bad("arrays.seq_offsets", f"must start at 0 and end at len(tokens) = {T}, got {int(off[0])} … {int(off[-1])}")
        lens = np.diff(off)
        if (lens < 1).any():
            i = int(np.argmax(lens < 1))
            raise bad("arrays.seq_offsets", f"sequence {i} is empty or the offsets decrease ({int(off[i])} → {int(off[i + 1])})")
        V, L = self.policy.vocab_size, self.policy.max_seq_len
        if (lens > L).any():
            i = int(np.argmax(lens > L))
            raise bad("arrays.seq_offsets", f"sequence {i} has {int(lens[i])} tokens, more than max_seq_len {L}")
        badtok = (tokens < 0) | (tokens >= V)
        if badtok.any():
            i = int(np.argmax(badtok))
            raise bad("arrays.tokens", f"token {i}: id {int(tokens[i])} outside the vocabulary [0, {V})")
        if (mask > 1).any():
            raise bad("arrays.loss_mask", f"values must be 0 or 1, found {int(mask.max())}")
        if mask[off[:-1]].any():
            i = int(np.argmax(mask[off[:-1]] != 0))
            raise bad("arrays.loss_mask", f"sequence {i}: the first token is masked for training, but nothing predicts it")
        m = mask.astype(bool)
        badlp = m & (np.isnan(roll) | (roll > 0))
        if badlp.any():
            i = int(np.argmax(badlp))
            raise bad("arrays.rollout_logprobs", f"token {i}: {float(roll[i])} is not a log-probability")
        if not m.any():
            raise bad("arrays.loss_mask", "no trained tokens (every loss mask is 0)")
        seq_tokens = [int(mask[off[i]:off[i + 1]].sum()) for i in range(S)]

        groups = req.get("groups")
        if groups is not None:
            if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
                raise bad("groups", "must be a list of text group ids")
            if len(groups) != S:
                raise bad("groups", f"{len(groups)} group ids but seq_offsets describes {S} sequences")
        if "rewards" in arr:
            rewards = parse_tensor(arr["rewards"], "arrays.rewards", "float32", 1)
            if len(rewards) != S:
                raise bad("arrays.rewards", f"{len(rewards)} values but seq_offsets describes {S} sequences")
            if not np.isfinite(rewards).all():
                raise bad("arrays.rewards", "must be finite")
        else:
            rewards = None
        if "advantages" in arr:
            adv = parse_tensor(arr["advantages"], "arrays.advantages", "float32", 1)
            if len(adv) != S:
                raise bad("arrays.advantages", f"{len(adv)} values but seq_offsets describes {S} sequences")
            if not np.isfinite(adv).all():
                raise bad("arrays.advantages", "must be finite")
            advantages = torch.from_numpy(adv.astype(np.float64))
        elif ce:
            advantages = torch.zeros(S, dtype=torch.float64)  # not read
        else:
            if rewards is None:
                raise bad("arrays.rewards", "missing (needed to compute advantages when arrays.advantages is absent)")
            if groups is None:
                raise bad("groups", "missing (GRPO advantages need a group id per sequence)")
            a = self.adv_cfg
            advantages = grpo_advantages(rewards.astype(np.float64), groups, a.norm_adv_by_std, a.epsilon)
        if self.loss_cfg.loss_reduction == "prompt_mean":
            if groups is None:
                raise bad("groups", "missing (prompt_mean averages per prompt)")
            for i, g in enumerate(groups):
                if g == "" and seq_tokens[i] > 0:
                    raise bad("groups", f"sequence {i} has no group id; prompt_mean averages per prompt")

        micro = req.get("microbatches")
        if micro is None:
            micro = [list(range(S))]
        if not isinstance(micro, list):
            raise bad("microbatches", "must be a list of lists of sequence indices")
        seen = [False] * S
        for k, mb in enumerate(micro):
            if not isinstance(mb, list):
                raise bad(f"microbatches[{k}]", "must be a list of sequence indices")
            for i in mb:
                if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < S or seen[i]:
                    raise bad(f"microbatches[{k}]", f"index {i!r} out of range or repeated (mini-batch of {S})")
                seen[i] = True
        if not all(seen):
            raise bad("microbatches", f"cover {sum(seen)} of {S} sequences")
        mranks = self.parse_microbatch_ranks(req.get("microbatch_ranks"), len(micro))
        routes, support = self.parse_replay(arr, tokens, mask, T)
        return Batch(tokens=torch.from_numpy(tokens.astype(np.int64)), offsets=[int(x) for x in off], mask=mask,
                     rollout=torch.from_numpy(roll.astype(np.float64)), advantages=advantages,
                     groups=groups if groups is not None else [""] * S, micro=micro, seq_tokens=seq_tokens,
                     versions=vers, loss=loss, routes=routes, support=support, micro_ranks=mranks)

    def parse_microbatch_ranks(self, mr, n: int) -> list[int]:
        """TrainBatch.microbatch_ranks: the rank of each microbatch; required
        in a world of more than one rank (else every rank would train the
        whole mini-batch and the all-reduce would count it world times)."""
        W = self.group.world
        if mr is None:
            if W > 1:
                raise bad("microbatch_ranks", f"required in a group of {W} ranks: the rank of each microbatch")
            return [0] * n
        if not isinstance(mr, list) or len(mr) != n:
            raise bad("microbatch_ranks", f"must list one rank per microbatch ({n})")
        for k, r in enumerate(mr):
            if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < W:
                raise bad(f"microbatch_ranks[{k}]", f"{r!r} is not a rank of this group of {W}")
        return mr

    def parse_replay(self, arr: dict, tokens: np.ndarray, mask: np.ndarray, T: int):
        """The optional routes and support arrays (None when absent)."""
        routes = support = None
        if "routes" in arr:
            r = parse_tensor(arr["routes"], "arrays.routes", "int32", 3)
            shape = self.policy.route_shape()
            if shape is None:
                raise bad("arrays.routes", "the model has no routed experts to replay")
            if r.shape[0] != T or tuple(r.shape[1:]) != tuple(shape[:2]):
                raise bad("arrays.routes", f"shape {list(r.shape)}, want [{T}, {shape[0]}, {shape[1]}]")
            if ((r < 0) | (r >= shape[2])).any():
                raise bad("arrays.routes", f"expert ids must lie in [0, {shape[2]})")
            # the rows a model reads (an HF model's dense layers' rows are
            # carried, not read) must name top_k distinct experts
            cols = getattr(self.policy, "route_read_layers", lambda: range(shape[0]))()
            if shape[1] > 1:
                srt = np.sort(r[:, list(cols)], axis=-1)
                dup = (np.diff(srt, axis=-1) == 0).any(-1)
                if dup.any():
                    i, j = np.argwhere(dup)[0]
                    raise bad("arrays.routes", f"token {int(i)}: row {list(cols)[int(j)]} lists an expert twice "
                                               f"({r[int(i), list(cols)[int(j)]].tolist()})")
            routes = torch.from_numpy(r.astype(np.int64))
        if "support" in arr:
            s = parse_tensor(arr["support"], "arrays.support", "int32", 2)
            if s.shape[0] != T or s.shape[1] < 1:
                raise bad("arrays.support", f"shape {list(s.shape)}, want [{T}, K]")
            m = mask.astype(bool)
            sm = s[m]
            if ((sm < -1) | (sm >= self.policy.vocab_size)).any():
                raise bad("arrays.support", f"ids must be -1 or in [0, {self.policy.vocab_size})")
            # a trained token's non-empty set must contain it (Go: checkSupport)
            has = (sm >= 0).any(1)
            inset = (sm == tokens[m][:, None]).any(1)
            if (has & ~inset).any():
                i = int(np.nonzero(m)[0][np.argmax(has & ~inset)])
                raise bad("arrays.support", f"token {i}: sampled id {int(tokens[i])} is not in its support set")
            support = torch.from_numpy(s.astype(np.int64))
        return routes, support

    def train_batch(self, req: dict) -> dict:
        self._need_init()
        b = self.parse_batch(req)
        step = self.step + 1
        params = self.policy.parameters()
        before_params = [p.detach().clone() for p in params]
        before_opt = copy.deepcopy(self.opt.state_dict())
        try:
            metrics, rank = self._step(b)
            serving, adapter, state = self._write_checkpoints(step)
        except Exception as e:
            self.opt.zero_grad(set_to_none=True)
            with torch.no_grad():
                for p, q in zip(params, before_params):
                    p.copy_(q)
            self.opt.load_state_dict(before_opt)
            if isinstance(e, FrameError):
                raise
            log.error("step %d failed, weights kept at version %d:\n%s", step, self.step, traceback.format_exc())
            raise FrameError("internal", "", f"step {step} failed, nothing applied: {type(e).__name__}: {e}") from None
        self.step = step
        out = {"type": "StepResult", "step": step, "metrics": metrics, "rank": rank, "checkpoint": serving, "state": state}
        if adapter:
            out["adapter"] = adapter
        return out

    def _step(self, b: Batch) -> tuple[dict, dict]:
        """One optimiser step: the step's metrics (the whole mini-batch's,
        equal on every rank) and this rank's figures."""
        t0 = time.perf_counter()
        cfg = self.loss_cfg
        S = len(b.seq_tokens)
        seq_mb = [0] * S
        for k, mb in enumerate(b.micro):
            for i in mb:
                seq_mb[i] = k
        w = sequence_weights(cfg, b.seq_tokens, b.groups, seq_mb, self.policy.max_seq_len)
        self.opt.zero_grad(set_to_none=True)
        tot = {"loss": 0.0, "pg": 0.0, "clipped": 0, "kl": 0.0, "ent": 0.0, "mismatch": 0.0, "is_ratio": 0.0,
               "mismatch_same": 0.0, "same": 0, "tokens": 0}
        nonfinite = 0.0
        ranks = b.micro_ranks or [0] * len(b.micro)
        for k, mb in enumerate(b.micro):
            if ranks[k] != self.group.rank:
                continue  # another rank's work
            idx = [i for i in mb if b.seq_tokens[i] > 0]
            if not idx:
                continue  # padding: adds nothing
            tl, ver = self._microbatch(b, idx, w)
            if not torch.isfinite(tl.total):
                if not self.group.active:
                    raise FloatingPointError(f"non-finite loss {float(tl.total)}")
                # the others are headed for the all-reduce: refuse together
                nonfinite = float(tl.total)
                break
            tl.total.backward()
            tot["loss"] += float(tl.total.detach())
            tot["pg"] += float(tl.pg)
            tot["clipped"] += tl.clipped
            tot["kl"] += tl.kl_sum
            tot["ent"] += tl.ent_sum
            tot["mismatch"] += tl.mismatch_sum
            tot["is_ratio"] += tl.is_ratio_sum
            # tokens generated by exactly the weights being trained (version
            # before this step): their mismatch is BF16 serving + engine error
            same = ver == self.step
            tot["mismatch_same"] += float(tl.mismatch_tok[same].sum())
            tot["same"] += int(same.sum())
            tot["tokens"] += int(sum(b.seq_tokens[i] for i in idx))
        all_params = list(self.policy.parameters())
        allreduce_s = 0.0
        if self.group.active:
            keys = list(tot)
            bad_flag = 0.0 if nonfinite == 0.0 else 1.0
            vec = [float(tot[k]) for k in keys] + [bad_flag] + [0.0 if p.grad is None else 1.0 for p in all_params]
            red = grp.allreduce_sums(self.group, vec)
            if red[len(keys)] > 0:
                raise FloatingPointError(f"non-finite loss on {int(red[len(keys)])} rank(s) of {self.group.world}"
                                         + (f" (this rank: {nonfinite})" if bad_flag else ""))
            for k, v in zip(keys, red):
                tot[k] = int(round(v)) if isinstance(tot[k], int) else v
            has = [v > 0 for v in red[len(keys) + 1:]]
            allreduce_s = grp.allreduce_grads(self.group, all_params, has)
        params = [p for p in all_params if p.grad is not None]
        norm = float(torch.sqrt(sum((p.grad.double() ** 2).sum() for p in params)))
        if not math.isfinite(norm):
            raise FloatingPointError(f"non-finite gradient norm {norm}")
        mg = self.optim_cfg.max_grad_norm
        if mg > 0 and norm > mg:
            # model/train.go applyAdam: scale by max_grad_norm / (norm + 1e-6)
            scale = mg / (norm + 1e-6)
            for p in params:
                p.grad.mul_(scale)
        lr = lr_at(self.optim_cfg, self.step + 1)
        for g in self.opt.param_groups:
            g["lr"] = lr
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        n = tot["tokens"]
        return {"loss": tot["loss"], "pg_loss": tot["pg"], "clip_frac": tot["clipped"] / n, "kl": tot["kl"] / n,
                "grad_norm": norm, "entropy": tot["ent"] / n, "mismatch": tot["mismatch"] / n, "is_ratio": tot["is_ratio"] / n,
                "mismatch_same_version": tot["mismatch_same"] / tot["same"] if tot["same"] else 0.0,
                "same_version_tokens": tot["same"], "tokens": n}, {
                # this rank's own figures (StepResult.rank, docs/protocol.md "Worker groups")
                "rank": self.group.rank, "world_size": self.group.world, "step_s": time.perf_counter() - t0,
                "allreduce_s": allreduce_s, "memory_bytes": grp.memory_bytes(cuda=False)}

    def _microbatch(self, b: Batch, idx: list[int], w: list[float]):
        """The token loss of one microbatch's sequences (not yet backpropagated)
        and the versions of its trained tokens."""
        cfg = self.loss_cfg
        seqs, poss, rts, targets, roll, adv, wt, sid, ver, sup = [], [], [], [], [], [], [], [], [], []
        for j, i in enumerate(idx):
            lo, hi = b.offsets[i], b.offsets[i + 1]
            seq = b.tokens[lo:hi]
            pos = torch.from_numpy(np.nonzero(b.mask[lo:hi])[0].astype(np.int64))
            seqs.append(seq)
            poss.append(pos)
            if b.routes is not None:
                rts.append(b.routes[lo:hi])
            targets.append(seq[pos])
            if b.support is not None:
                sup.append(b.support[lo:hi][pos])
            roll.append(b.rollout[lo:hi][pos])
            ver.append(torch.from_numpy(b.versions[lo:hi].astype(np.int64))[pos])
            n = len(pos)
            adv.append(b.advantages[i].expand(n))
            wt.append(torch.full((n,), w[i], dtype=torch.float64))
            sid.append(torch.full((n,), j, dtype=torch.long))
        # one call per microbatch: the HF models run its sequences as one padded batch
        logits = vocab.source(self.policy, seqs, poss, rts if b.routes is not None else None)
        if b.loss == "cross_entropy":
            tl = cross_entropy_loss(logits, torch.cat(targets), torch.cat(wt))
        else:
            tl = token_loss(cfg, logits, torch.cat(targets), torch.cat(roll), torch.cat(adv),
                            torch.cat(wt), torch.cat(sid), len(idx), support=torch.cat(sup) if sup else None)
        return tl, torch.cat(ver)

    # --- checkpoints -----------------------------------------------------------

    def _write_dir(self, final: str, write) -> str:
        """Write into a temp dir next to final, then rename: a reader sees a
        complete directory or none. An existing final (a retried step) is replaced."""
        parent = os.path.dirname(os.path.abspath(final))
        os.makedirs(parent, exist_ok=True)
        tmp = tempfile.mkdtemp(dir=parent, prefix="." + os.path.basename(final) + ".tmp-")
        try:
            write(tmp)
            os.chmod(tmp, 0o755)
            if os.path.exists(final):
                shutil.rmtree(final)
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return final

    def _write_state(self, d: str, step: int) -> None:
        self.policy.save_weights_f32(d)
        lora = getattr(self.policy, "lora", None)
        torch.save({"step": step, "kind": self.policy.kind, "optimizer": self.opt.state_dict(),
                    "torch_rng": torch.get_rng_state(), "lora": lora is not None}, os.path.join(d, OPTIMIZER_FILE))

    def _write_state_dir(self, final: str, step: int) -> str:
        """The resume state of version step in final: one rank's layout, or
        in a group the sharded one every rank writes its part of."""
        if not self.group.active:
            return self._write_dir(final, lambda d: self._write_state(d, step))
        lora = getattr(self.policy, "lora", None) is not None
        return shards.write(final, self.group, step, self.policy.kind, lora, list(self.policy.parameters()), self.opt,
                            self.policy.save_weights_f32)

    def _write_checkpoints(self, step: int) -> tuple[str, str | None, str]:
        """The serving checkpoint, the PEFT adapter (LoRA runs; else None)
        and the resume state of version step. In a group rank 0 writes the
        serving checkpoint and the adapter (the replicas are equal after the
        step: it is the gathered model) and every rank its shard of the
        state (asyncrl_worker.shards); every rank names them."""
        state = self._write_state_dir(os.path.join(self.out_dir, STATE_DIR.format(step)), step)
        if self.group.rank != 0:
            lora = getattr(self.policy, "lora", None) is not None
            return (os.path.join(self.out_dir, SERVING_DIR.format(step)),
                    os.path.join(self.out_dir, ADAPTER_DIR.format(step)) if lora else None, state)
        serving = self._write_dir(os.path.join(self.out_dir, SERVING_DIR.format(step)),
                                  lambda d: self.policy.save_serving(d, step))
        adapter = None
        if getattr(self.policy, "lora", None) is not None:
            adapter = self._write_dir(os.path.join(self.out_dir, ADAPTER_DIR.format(step)),
                                      lambda d: self.policy.save_adapter(d, step))
        return serving, adapter, state

    def save_checkpoint(self, req: dict) -> dict:
        _check_keys(req, {"v", "type", "id", "dir", "serving"}, "", ("dir",))
        self._need_init()
        d = req["dir"]
        if not isinstance(d, str) or not d:
            raise bad("dir", "must be a directory path")
        # optional field of v1 (Tinker's save_weights_for_sampler): the BF16
        # serving checkpoint instead of the resume state
        serving = req.get("serving", False)
        if not isinstance(serving, bool):
            raise bad("serving", "must be a bool")
        try:
            if serving:
                if self.group.rank == 0:
                    self._write_dir(d, lambda t: self.policy.save_serving(t, self.step))
            else:
                self._write_state_dir(d, self.step)
        except OSError as e:
            raise FrameError("internal", "dir", f"cannot write {d}: {e}") from None
        return {"type": "Saved", "dir": d, "step": self.step}

    # --- Tinker's split calls (asyncrl_worker.tinker) ------------------------

    def _need_world_of_one(self):
        if self.group.active:
            raise bad("type", f"Tinker's split calls need a world of one rank, this worker is rank "
                              f"{self.group.rank} of {self.group.world}")

    def forward_backward(self, req: dict) -> dict:
        self._need_init()
        self._need_world_of_one()
        return tinker.forward_backward(self, req)

    def optim_step(self, req: dict) -> dict:
        self._need_init()
        self._need_world_of_one()
        return tinker.optim_step(self, req)

    def shutdown(self, req: dict) -> dict:
        _check_keys(req, {"v", "type", "id"}, "")
        self.done = True
        return {"type": "Bye"}


def serve(rd, wr, worker: Worker | None = None) -> int:
    """Answer frames from rd on wr until Shutdown or end of input; returns
    the exit status. A rank of a group leaves it (destroys its process
    group) before it returns."""
    w = worker or Worker()
    try:
        while not w.done:
            try:
                req = read_frame(rd)
            except EOF:
                log.info("stdin closed; exiting")
                return 0
            except FrameError as e:
                write_frame(wr, error_frame(0, e.code, e.field, e.message))
                continue
            write_frame(wr, w.handle(req))
        return 0
    finally:
        try:
            if grp.leave(w.group):
                log.info("left the process group (rank %d of %d)", w.group.rank, w.group.world)
        except Exception as e:  # noqa: BLE001 — the exit must not fail on it
            log.warning("leaving the process group: %s", e)
