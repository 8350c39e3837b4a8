"""SkyRL's policy losses, loss reductions, off-policy correction and GRPO
advantages, in the form asyncrl's Go trainer (model/train.go) implements them.

Sources (NovaSky-AI/SkyRL):
  skyrl/backends/skyrl_train/utils/ppo_utils.py — ppo_policy_loss (regular,
    dual_clip), gspo_policy_loss, compute_policy_loss_cispo, reduce_loss,
    apply_loss_reduction_to_advantages_minibatch, compute_grpo_outcome_advantage;
  skyrl/backends/skyrl_train/utils/off_policy_correction_utils.py —
    compute_tis_ratio (token / sequence truncated importance sampling);
  skyrl/backends/skyrl_train/utils/torch_utils.py — safe_exp_delta
    (exp of the log-ratio clamped to [-20, 20]).

SkyRL scales each sequence's advantages by the reduction's factor and then
sums the token losses (reduce_loss = (loss * mask).sum()). Every policy loss
here is positively homogeneous in the advantage, so that equals
sum_t weight_t * loss_t(A) with weight_t the reduction factor — the form Go's
Trainer.tokenWeight uses and this module uses too. As in Go, the k3 KL term
(against the rollout logprobs, no clamp) and the entropy bonus use the same
per-token weights:
    total = sum_t w_t * (pg_t * tis_t + kl_coef * k3_t - entropy_coef * H_t).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch

from . import vocab

POLICY_LOSSES = ("regular", "dual_clip", "gspo", "cispo")
REDUCTIONS = ("token_mean", "sequence_mean", "seq_mean_token_sum_norm", "prompt_mean", "token_mean_legacy")
TIS_TYPES = ("none", "token", "sequence")


@dataclass
class LossConfig:
    """The trainer section's loss keys under their YAML names (Go's
    config.TrainerConfig); defaults are model.DefaultTrainerConfig's."""

    policy_loss_type: str = "regular"
    eps_clip_low: float = 0.2
    eps_clip_high: float = 0.2
    clip_ratio_c: float = 3.0
    cispo_eps_clip_low: float = 0.0
    cispo_eps_clip_high: float = 5.0
    loss_reduction: str = "token_mean"
    max_seq_len: int = 0  # seq_mean_token_sum_norm divisor; 0 = the model's max_seq_len
    tis_ratio_type: str = "none"
    token_tis_ratio_clip_high: float = 2.0
    sequence_tis_ratio_clip_high: float = 5.0
    entropy_coef: float = 0.01
    kl_coef: float = 0.0
    normalize_over_support: bool = False
    temperature: float = 1.0

    @classmethod
    def keys(cls) -> set[str]:
        return {f.name for f in fields(cls)}

    def validate(self) -> None:
        """Raise ValueError(field, message) for the first bad field
        (model.TrainerConfig.Validate's rules)."""

        def num(name, ok, want):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not ok(float(v)):
                raise ValueError(name, f"{name} must be {want}, got {v!r}")

        if self.tis_ratio_type in ("", None):
            self.tis_ratio_type = "none"
        if self.policy_loss_type not in POLICY_LOSSES:
            raise ValueError("policy_loss_type", f"policy_loss_type must be one of {', '.join(POLICY_LOSSES)}, got {self.policy_loss_type!r}")
        if self.loss_reduction not in REDUCTIONS:
            raise ValueError("loss_reduction", f"loss_reduction must be one of {', '.join(REDUCTIONS)}, got {self.loss_reduction!r}")
        if self.tis_ratio_type not in TIS_TYPES:
            raise ValueError("tis_ratio_type", f"tis_ratio_type must be \"\", none, token or sequence, got {self.tis_ratio_type!r}")
        fin = math.isfinite
        num("eps_clip_low", lambda v: 0 <= v < 1, "in [0, 1)")
        num("eps_clip_high", lambda v: v >= 0 and fin(v), ">= 0")
        num("clip_ratio_c", lambda v: v > 1 and fin(v), "> 1 and finite")
        num("cispo_eps_clip_low", lambda v: 0 <= v <= 1, "in [0, 1]")
        num("cispo_eps_clip_high", lambda v: v >= 0 and fin(v), ">= 0 and finite")
        num("token_tis_ratio_clip_high", lambda v: v > 0 and fin(v), "> 0 and finite")
        num("sequence_tis_ratio_clip_high", lambda v: v > 0 and fin(v), "> 0 and finite")
        num("entropy_coef", lambda v: v >= 0 and fin(v), ">= 0")
        num("kl_coef", lambda v: v >= 0 and fin(v), ">= 0")
        num("temperature", lambda v: v > 0 and fin(v), "> 0 and finite")
        if isinstance(self.max_seq_len, bool) or not isinstance(self.max_seq_len, int) or self.max_seq_len < 0:
            raise ValueError("max_seq_len", f"max_seq_len must be an integer >= 0 (0 = the model's), got {self.max_seq_len!r}")
        if not isinstance(self.normalize_over_support, bool):
            raise ValueError("normalize_over_support", "normalize_over_support must be a bool")


def safe_exp_delta(x: torch.Tensor, clip: float = 20.0) -> torch.Tensor:
    """SkyRL torch_utils.safe_exp_delta: exp(clamp(x, -clip, clip))."""
    return torch.exp(torch.clamp(x, -clip, clip))


def grpo_advantages(rewards, groups, norm_by_std: bool = True, epsilon: float = 1e-6) -> torch.Tensor:
    """ppo_utils.compute_grpo_outcome_advantage: per group (exact id equality)
    (score - mean) / (std + epsilon) with the unbiased std, or score - mean;
    a singleton group uses mean 0, std 1. float64 [S]."""
    r = torch.as_tensor(rewards, dtype=torch.float64)
    if len(groups) != r.shape[0]:
        raise ValueError(f"{r.shape[0]} rewards but {len(groups)} group ids")
    members: dict = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    out = torch.zeros_like(r)
    for idx in members.values():
        s = r[idx]
        if len(idx) == 1:
            mean, std = 0.0, 1.0
        else:
            mean, std = s.mean(), s.std(unbiased=True)
        out[idx] = (s - mean) / (std + epsilon) if norm_by_std else s - mean
    return out


def sequence_weights(cfg: LossConfig, seq_tokens, groups, seq_microbatch, model_max_seq_len: int) -> list[float]:
    """Per-sequence reduction factor w_s: summing w_s * token loss over the
    mini-batch gives the reduction (apply_loss_reduction_to_advantages_minibatch;
    Go's Trainer.tokenWeight).

    seq_tokens[s]: trained tokens of sequence s; groups[s]: its prompt ("" = none);
    seq_microbatch[s]: index of the microbatch holding s (token_mean_legacy).
    S counts every sequence of the mini-batch, as SkyRL's batch_size does."""
    S = len(seq_tokens)
    red = cfg.loss_reduction
    if red == "token_mean":
        return [1.0 / max(sum(seq_tokens), 1)] * S
    if red == "sequence_mean":
        return [1.0 / (max(n, 1) * S) for n in seq_tokens]
    if red == "seq_mean_token_sum_norm":
        L = cfg.max_seq_len or model_max_seq_len
        return [1.0 / (S * L)] * S
    if red == "prompt_mean":
        ptok: dict[str, int] = {}
        for n, g in zip(seq_tokens, groups):
            if g != "":
                ptok[g] = ptok.get(g, 0) + n
        P = len(ptok)
        return [0.0 if g == "" else 1.0 / (P * max(ptok[g], 1)) for g in groups]
    # token_mean_legacy: token mean within each microbatch, then the mean over
    # the microbatches that hold trained tokens.
    mb_tok: dict[int, int] = {}
    for n, m in zip(seq_tokens, seq_microbatch):
        mb_tok[m] = mb_tok.get(m, 0) + n
    M = sum(1 for v in mb_tok.values() if v > 0)
    return [1.0 / (max(mb_tok[m], 1) * max(M, 1)) for m in seq_microbatch]


@dataclass
class TokenLoss:
    total: torch.Tensor  # scalar: sum_t w_t * (pg*tis + kl*k3 - ent*H)
    pg: torch.Tensor  # scalar: sum_t w_t * pg*tis (detached)
    clipped: int  # tokens counted by SkyRL's clip_ratio
    kl_sum: float  # sum of k3 over tokens
    ent_sum: float
    mismatch_sum: float  # sum |lp - rollout|
    mismatch_tok: torch.Tensor  # |lp - rollout| per token (detached, [N])
    is_ratio_sum: float  # sum exp(old - rollout) (before any cap)


def policy_loss(cfg: LossConfig, lp: torch.Tensor, old: torch.Tensor, adv: torch.Tensor,
                seq_id: torch.Tensor, n_seq: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token policy loss and SkyRL's clip indicator over the trained tokens
    (flat [N]; seq_id[N] in [0, n_seq) maps each token to its sequence)."""
    t = cfg.policy_loss_type
    if t == "cispo":
        # compute_policy_loss_cispo (cispo_anchor "old"): -A * sg(clamp(r)) * logp.
        ratio = safe_exp_delta(lp - old)
        lo, hi = 1 - cfg.cispo_eps_clip_low, 1 + cfg.cispo_eps_clip_high
        loss = -adv * torch.clamp(ratio, lo, hi).detach() * lp
        return loss, (ratio < lo) | (ratio > hi)
    if t == "gspo":
        # gspo_policy_loss: log s_i = masked mean of (lp - old) over the sequence;
        # token ratio exp(min(lp - sg(lp) + sg(log s_i), 10)).
        log_ratio = (lp - old).detach()
        sums = torch.zeros(n_seq, dtype=lp.dtype).index_add_(0, seq_id, log_ratio)
        cnt = torch.zeros(n_seq, dtype=lp.dtype).index_add_(0, seq_id, torch.ones_like(lp))
        log_iw = (sums / cnt.clamp(min=1))[seq_id]
        ratio = torch.exp(torch.clamp(lp - lp.detach() + log_iw, max=10))
    else:
        # ppo_policy_loss: ratio = safe_exp_delta(lp - old, clip=20).
        ratio = safe_exp_delta(lp - old)
    surr1 = ratio * adv
    surr2 = ratio.clamp(1 - cfg.eps_clip_low, 1 + cfg.eps_clip_high) * adv
    loss = -torch.min(surr1, surr2)
    clipped = -surr2 > -surr1
    if t == "dual_clip":
        # pg_losses3 = -A * clip_ratio_c caps the loss where A < 0.
        loss = torch.where(adv < 0, torch.min(-adv * cfg.clip_ratio_c, loss), loss)
    return loss, clipped


def tis_factor(cfg: LossConfig, old: torch.Tensor, rollout: torch.Tensor, seq_id: torch.Tensor, n_seq: int) -> torch.Tensor | None:
    """off_policy_correction_utils.compute_tis_ratio (detached), or None."""
    if cfg.tis_ratio_type == "token":
        return torch.clamp(safe_exp_delta(old - rollout), max=cfg.token_tis_ratio_clip_high).detach()
    if cfg.tis_ratio_type == "sequence":
        s = torch.zeros(n_seq, dtype=old.dtype).index_add_(0, seq_id, (old - rollout).detach())
        return torch.clamp(safe_exp_delta(s), max=cfg.sequence_tis_ratio_clip_high)[seq_id].detach()
    return None


def support_lse(logp_all: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
    """log sum_{v in support} p_v per row ([N]) of log-probabilities logp_all
    [N, V] over support ids [N, K] (-1 padding); 0 for a row without ids
    (the full vocabulary). Go's Trainer.tokenLogprob subtracts log(ssum)."""
    return vocab._masked_lse(logp_all.gather(1, support.clamp(min=0).long()), support >= 0)


def token_loss(cfg: LossConfig, logits, targets: torch.Tensor, rollout: torch.Tensor,
               adv: torch.Tensor, weight: torch.Tensor, seq_id: torch.Tensor, n_seq: int,
               old: torch.Tensor | None = None, support: torch.Tensor | None = None) -> TokenLoss:
    """The loss of N trained tokens given their logits [N, V] (float64 math)
    or a vocab.Projection (the lm_head's input and weight: the vocabulary
    statistics chunk by chunk in float32, then the same float64 math; the
    HF models' path, see asyncrl_worker/vocab.py).

    old is the PPO "old" logprob; None means the trainer's own forward pass
    before the update (trainer.fwd_logprobs_values_reward in SkyRL), i.e. the
    detached logprobs of these very logits. rollout (the engine's logprobs)
    enters only through TIS, the k3 KL term and the mismatch statistic.

    With cfg.normalize_over_support and support ([N, K] sample support ids,
    -1 padding), each logprob is renormalised over its token's support set
    (model/train.go SupportNorm: lp - log sum_{v in S} p_v); the entropy
    bonus stays over the full vocabulary, as in Go."""
    use_support = cfg.normalize_over_support and support is not None
    lp, ent, s_lse = vocab.token_stats(logits, targets, cfg.temperature, support if use_support else None,
                                       entropy_grad=torch.is_grad_enabled() and cfg.entropy_coef != 0)
    if use_support:
        lp = lp - s_lse
    old = lp.detach() if old is None else old.double()
    rollout, adv, weight = rollout.double(), adv.double(), weight.double()
    pg, clipped = policy_loss(cfg, lp, old, adv, seq_id, n_seq)
    tis = tis_factor(cfg, old, rollout, seq_id, n_seq)
    if tis is not None:
        pg = pg * tis
    x = rollout - lp  # k3 of (rollout || trainer), as Go's TrainerConfig.KLCoef
    k3 = torch.exp(x) - x - 1
    total = (weight * (pg + cfg.kl_coef * k3 - cfg.entropy_coef * ent)).sum()
    return TokenLoss(
        total=total,
        pg=(weight * pg).sum().detach(),
        clipped=int(clipped.sum()),
        kl_sum=float(k3.detach().sum()),
        ent_sum=float(ent.detach().sum()),
        mismatch_sum=float((lp.detach() - rollout).abs().sum()),
        mismatch_tok=(lp.detach() - rollout).abs(),
        is_ratio_sum=float(safe_exp_delta(old - rollout).sum()),
    )


def cross_entropy_loss(logits, targets: torch.Tensor, weight: torch.Tensor) -> TokenLoss:
    """SFT's objective (TrainBatch loss "cross_entropy"): the NLL of N trained
    tokens, -log_softmax(logits)[target] at temperature 1, weighted by the
    reduction's per-token factors (token_mean: the mean NLL), as Go's
    model.LossCrossEntropy. No rollout logprobs, advantages, clipping, TIS,
    KL or entropy bonus; the RL statistics are zero."""
    lp, ent, _ = vocab.token_stats(logits, targets)  # ent: a metric only (detached)
    total = -(weight.double() * lp).sum()
    zero = torch.zeros_like(lp)
    return TokenLoss(total=total, pg=total.detach(), clipped=0, kl_sum=0.0, ent_sum=float(ent.detach().sum()),
                     mismatch_sum=0.0, mismatch_tok=zero, is_ratio_sum=0.0)
