"""Tinker's split training calls (docs/protocol.md, optional frames
ForwardBackward and OptimStep of v1): ForwardBackward adds a loss's gradient
to the parameters' .grad (accumulating across calls), OptimStep applies it
with the call's AdamW parameters and clears it.

The losses are tinker/gotrain's, per target token with logprob lp = log_softmax
(logits)[target] at temperature 1, summed (never averaged: callers put the
normalisation in weights/advantages):

    cross_entropy        -w * lp
    importance_sampling  -r * A,            r = exp(clamp(lp - q, -20, 20))
    ppo                  -min(r*A, clip(r, lo, hi)*A)  (no gradient when the clipped term wins)
    cispo                -sg(clip(r, lo, hi)) * A * lp

Position i of a datum predicts target_tokens[i] from its tokens up to and
including i (Tinker's model_input / target_tokens alignment).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .frames import FrameError, parse_tensor, tensor_obj
from . import vocab
from .model import PAD

LOSSES = ("cross_entropy", "importance_sampling", "ppo", "cispo")


def bad(field: str, message: str) -> FrameError:
    return FrameError("bad_field", field, message)


def _check(req: dict, allowed: set, required=()) -> None:
    for k in req:
        if k not in allowed:
            raise bad(k, "unknown key")
    for k in required:
        if k not in req:
            raise bad(k, "missing")


def element_loss(name: str, lp: torch.Tensor, w, q, a, lo: float, hi: float) -> torch.Tensor:
    """Per-token loss of name (lp float64 with grad; w, q, a float64 [N])."""
    if name == "cross_entropy":
        return -w * lp
    r = torch.exp(torch.clamp(lp - q, -20, 20))
    if name == "importance_sampling":
        return -r * a
    c = torch.clamp(r, lo, hi)
    if name == "ppo":
        un, cl = r * a, c * a
        return -torch.where(un <= cl, un, cl.detach())
    if name == "cispo":
        return -c.detach() * a * lp
    raise bad("loss", f"must be one of {', '.join(LOSSES)}, got {name!r}")


def forward_backward(w, req: dict) -> dict:
    """One ForwardBackward on worker w (validated fully before the model runs)."""
    _check(req, {"v", "type", "id", "loss", "loss_config", "backward", "arrays"}, ("loss", "arrays"))
    name = req["loss"]
    if name not in LOSSES:
        raise bad("loss", f"must be one of {', '.join(LOSSES)}, got {name!r}")
    backward = req.get("backward", True)
    if not isinstance(backward, bool):
        raise bad("backward", "must be a bool")
    cfg = req.get("loss_config") or {}
    if not isinstance(cfg, dict):
        raise bad("loss_config", "must be a map")
    lo, hi = 0.8, 1.2
    for k, v in cfg.items():
        if k not in ("clip_low_threshold", "clip_high_threshold"):
            raise bad(f"loss_config.{k}", "unknown key")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise bad(f"loss_config.{k}", f"must be a finite number, got {v!r}")
    lo = float(cfg.get("clip_low_threshold", lo))
    hi = float(cfg.get("clip_high_threshold", hi))
    arr = req["arrays"]
    if not isinstance(arr, dict):
        raise bad("arrays", "must be a map")
    need = ["tokens", "seq_offsets", "target_tokens"]
    if name != "cross_entropy":
        need += ["logprobs", "advantages"]
    for k in arr:
        if k not in ("tokens", "seq_offsets", "target_tokens", "weights", "logprobs", "advantages"):
            raise bad(f"arrays.{k}", "unknown array")
    for k in need:
        if k not in arr:
            raise bad(f"arrays.{k}", f"missing (loss {name} needs it)")
    tokens = parse_tensor(arr["tokens"], "arrays.tokens", "int32", 1)
    off = parse_tensor(arr["seq_offsets"], "arrays.seq_offsets", "int64", 1)
    tgt = parse_tensor(arr["target_tokens"], "arrays.target_tokens", "int32", 1)
    T = len(tokens)
    f32 = {}
    for k in ("weights", "logprobs", "advantages"):
        if k in arr:
            a = parse_tensor(arr[k], f"arrays.{k}", "float32", 1)
            if len(a) != T:
                raise bad(f"arrays.{k}", f"{len(a)} values but tokens has {T}")
            if not np.isfinite(a).all():
                raise bad(f"arrays.{k}", "must be finite")
            f32[k] = torch.from_numpy(a.astype(np.float64))
    if len(tgt) != T:
        raise bad("arrays.target_tokens", f"{len(tgt)} values but tokens has {T}")
    if len(off) < 2 or off[0] != 0 or off[-1] != T or (np.diff(off) < 1).any():
        raise bad("arrays.seq_offsets", f"must start at 0, increase strictly and end at len(tokens) = {T}")
    V, L = w.policy.vocab_size, w.policy.max_seq_len
    for nm, a in (("tokens", tokens), ("target_tokens", tgt)):
        badtok = (a < 0) | (a >= V)
        if badtok.any():
            i = int(np.argmax(badtok))
            raise bad(f"arrays.{nm}", f"token {i}: id {int(a[i])} outside the vocabulary [0, {V})")
    lens = np.diff(off)
    if (lens > L).any():
        i = int(np.argmax(lens > L))
        raise bad("arrays.seq_offsets", f"datum {i} has {int(lens[i])} tokens, the model takes at most {L}")

    wt = f32.get("weights", torch.ones(T, dtype=torch.float64))
    q = f32.get("logprobs", torch.zeros(T, dtype=torch.float64))
    adv = f32.get("advantages", torch.zeros(T, dtype=torch.float64))
    tok = torch.from_numpy(tokens.astype(np.int64))
    tg = torch.from_numpy(tgt.astype(np.int64))
    lps, els = [], []
    total = torch.zeros((), dtype=torch.float64)
    with torch.set_grad_enabled(backward):
        # every datum's logits in one call (the HF models batch them); the
        # appended PAD is never read: position p's logits come from tokens[:p]
        seqs = [torch.cat([tok[int(off[i]):int(off[i + 1])], torch.tensor([PAD], dtype=torch.long)])
                for i in range(len(off) - 1)]
        poss = [torch.arange(1, len(s), dtype=torch.long) for s in seqs]
        # the HF models: chunked over the vocabulary (asyncrl_worker/vocab.py)
        lp_all = vocab.logprobs(vocab.source(w.policy, seqs, poss), tg)
        for i in range(len(off) - 1):
            lo_i, hi_i = int(off[i]), int(off[i + 1])
            lp = lp_all[lo_i:hi_i]
            el = element_loss(name, lp, wt[lo_i:hi_i], q[lo_i:hi_i], adv[lo_i:hi_i], lo, hi)
            lps.append(lp.detach())
            els.append(el.detach())
            total = total + el.sum()
    if not torch.isfinite(total):
        raise FrameError("internal", "", f"non-finite loss {float(total)}; no gradient added")
    if backward and total.requires_grad:
        total.backward()  # adds to .grad: Tinker accumulates until optim_step
    lp_all = torch.cat(lps).float().numpy()
    el_all = torch.cat(els).float().numpy()
    return {"type": "ForwardBackwardResult", "step": w.step, "loss": float(total.detach()),
            "arrays": {"logprobs": tensor_obj(lp_all), "elementwise_loss": tensor_obj(el_all)},
            "metrics": {"loss:sum": float(total.detach()), "tokens:sum": T}}


def optim_step(w, req: dict) -> dict:
    """Apply the accumulated gradient with AdamW (the call's parameters) and clear it."""
    _check(req, {"v", "type", "id", "lr", "beta1", "beta2", "eps", "weight_decay", "grad_clip_norm"},
           ("lr", "beta1", "beta2", "eps"))
    p = {}
    for k in ("lr", "beta1", "beta2", "eps", "weight_decay", "grad_clip_norm"):
        v = req.get(k, 0.0)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise bad(k, f"must be a finite number, got {v!r}")
        p[k] = float(v)
    if p["lr"] < 0:
        raise bad("lr", f"must be >= 0, got {p['lr']}")
    for k in ("beta1", "beta2"):
        if not 0 <= p[k] < 1:
            raise bad(k, f"must be in [0, 1), got {p[k]}")
    if not p["eps"] > 0:
        raise bad("eps", f"must be > 0, got {p['eps']}")
    for k in ("weight_decay", "grad_clip_norm"):
        if p[k] < 0:
            raise bad(k, f"must be >= 0, got {p[k]}")
    params = [x for x in w.policy.parameters() if x.grad is not None]
    norm = float(torch.sqrt(sum(((x.grad.double() ** 2).sum() for x in params), torch.zeros((), dtype=torch.float64))))
    if not math.isfinite(norm):
        w.opt.zero_grad(set_to_none=True)
        raise FrameError("internal", "", f"gradient norm is {norm}; step skipped, gradient cleared")
    clip = p["grad_clip_norm"]
    if clip > 0 and norm > clip:
        for x in params:  # tinker/gotrain: scale by clip / norm
            x.grad.mul_(clip / norm)
    for g in w.opt.param_groups:
        g.update(lr=p["lr"], betas=(p["beta1"], p["beta2"]), eps=p["eps"], weight_decay=p["weight_decay"])
    if params:
        w.opt.step()
    w.opt.zero_grad(set_to_none=True)
    w.step += 1
    return {"type": "OptimStepResult", "step": w.step,
            "metrics": {"grad_norm:mean": norm, "learning_rate:mean": p["lr"], "step:max": w.step}}
