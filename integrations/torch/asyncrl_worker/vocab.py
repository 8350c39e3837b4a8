"""Per-token statistics over the vocabulary -- the target's log-probability,
the entropy, a support set's log-mass -- without materialising the whole
[tokens, vocab] logits.

A large vocabulary (Qwen3's 151,936) makes the logits of a TrainBatch the
biggest tensor of the step by far: 3,000 trained tokens are 1.8 GB in
float32 and twice that in float64, and the log-softmax, the entropy and
their backward passes over them cost more than the model itself on a small
model. `Projection` holds the lm_head's input and weight instead; the
logits are computed chunk by chunk over tokens (at most CHUNK_BYTES of
float32 logits per chunk), reduced to a few numbers per token, and
recomputed chunk by chunk in the backward pass (`_ChunkedHead`), so the
peak memory is a few chunks however many tokens the step trains.

What a chunk returns per token, in float32 (x = logits / temperature):
  sel[i, j] = x[i, cols[i, j]]           the logits of chosen ids (the
                                          target, then the support set)
  lse[i]    = logsumexp(x[i])            (max-shifted, float32 sums)
  mu[i]     = sum_v softmax(x[i])_v x_v  so the entropy is lse - mu
Everything the losses need is then composed in float64 autograd from these
three: logprob = sel[:, 0] - lse, entropy = lse - mu, and the support-
normalised logprob sel[:, 0] - logsumexp(sel[:, 1:]) (model/train.go
SupportNorm: lp - log sum_{v in S} p_v). The gradient of x is
  d/dx = scatter(g_sel at cols) + p * (g_lse + g_mu * (1 + x - mu)),
p = exp(x - lse), then d/dlogits = d/dx / temperature, d/dhidden = d/dlogits
@ W and d/dW = d/dlogits^T @ hidden, accumulated chunk by chunk.

Precision: the logits were float32 before too (a float32 matmul); what
changes is that logsumexp and the entropy's sums run in float32 instead of
float64 -- max-shifted, so the error is the float32 rounding of sums of
<= 1 over the vocabulary (bench/results/lora.md states what was measured
on real shapes). The built-in policy (small vocabulary, Go comparisons at
1e-9) keeps the float64 path: `Projection` is only what the HF models hand
the loss.
"""

from __future__ import annotations

import math

import torch

# float32 logits per chunk: chunk_tokens = CHUNK_BYTES // (4 * vocab),
# 55 tokens at vocab 151,936. A chunk's forward holds two such buffers
# (the logits and their exponentials), its backward two as well.
CHUNK_BYTES = 32 << 20


class Projection:
    """The lm_head's input hidden [N, H] and weight [V, H] (the embedding
    when tied): logits = hidden @ weight.T / temperature, never formed whole.
    Both may carry gradients (the weight through a straight-through node
    under fake quantisation)."""

    def __init__(self, hidden: torch.Tensor, weight: torch.Tensor, chunk_tokens: int | None = None):
        if hidden.dim() != 2 or weight.dim() != 2 or hidden.shape[1] != weight.shape[1]:
            raise ValueError(f"hidden {list(hidden.shape)} and lm_head {list(weight.shape)} do not fit")
        self.hidden, self.weight = hidden, weight
        self.chunk_tokens = chunk_tokens or max(1, CHUNK_BYTES // (4 * weight.shape[0]))

    def __len__(self) -> int:
        return self.hidden.shape[0]

    @property
    def vocab_size(self) -> int:
        return self.weight.shape[0]

    def logits(self) -> torch.Tensor:
        """The whole [N, V] logits (tests and small cases only)."""
        return self.hidden @ self.weight.t()


def source(policy, seqs, positions, routes=None):
    """What the losses read the vocabulary from for these sequences' trained
    positions: a Projection from a policy that offers one (projection_many:
    the HF models, unless their chunked_loss is off) or the logits
    themselves (logits_many: the built-in policy, float64 downstream as Go's
    trainer)."""
    if getattr(policy, "chunked_loss", False):
        return policy.projection_many(seqs, positions, routes)
    return policy.logits_many(seqs, positions, routes)


class _ChunkedHead(torch.autograd.Function):
    """(hidden, weight, cols, inv_t, chunk) -> (sel [N, K], lse [N], mu [N]),
    float32; cols [N, K] int64 with -1 for 'no id' (its sel is 0 and gets no
    gradient). The backward recomputes each chunk's logits."""

    @staticmethod
    def forward(ctx, hidden, weight, cols, inv_t, chunk):
        N, K = cols.shape
        sel = hidden.new_empty(N, K)
        lse = hidden.new_empty(N)
        mu = hidden.new_empty(N)
        safe = cols.clamp(min=0)
        # two work buffers for every chunk: allocating [chunk, V] afresh per
        # chunk costs a page fault per 4 KiB (glibc mmaps blocks this size)
        xb, eb = _buffers(hidden, weight, chunk, N)
        wt = weight.t()
        for a in range(0, N, chunk):
            b = min(N, a + chunk)
            x, e = xb[:b - a], eb[:b - a]
            torch.mm(hidden[a:b], wt, out=x)
            if inv_t != 1.0:
                x.mul_(inv_t)
            m = x.max(dim=1, keepdim=True).values
            torch.sub(x, m, out=e).exp_()
            s = e.sum(1)
            lse[a:b] = m.squeeze(1) + s.log()
            mu[a:b] = e.mul_(x).sum(1) / s
            sel[a:b] = x.gather(1, safe[a:b])
        del xb, eb
        sel.masked_fill_(cols < 0, 0.0)
        ctx.save_for_backward(hidden, weight, cols, lse, mu)
        ctx.inv_t, ctx.chunk = inv_t, chunk
        ctx.set_materialize_grads(False)
        return sel, lse, mu

    @staticmethod
    def backward(ctx, g_sel, g_lse, g_mu):
        hidden, weight, cols, lse, mu = ctx.saved_tensors
        inv_t, chunk = ctx.inv_t, ctx.chunk
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        d_h = torch.zeros_like(hidden) if need_h else None
        d_w = torch.zeros_like(weight) if need_w else None
        if g_sel is None and g_lse is None and g_mu is None:
            return d_h, d_w, None, None, None
        N = hidden.shape[0]
        valid = cols >= 0
        safe = cols.clamp(min=0)
        xb, pb = _buffers(hidden, weight, chunk, N)
        wt = weight.t()
        for a in range(0, N, chunk):
            b = min(N, a + chunk)
            h = hidden[a:b]
            x, p = xb[:b - a], pb[:b - a]
            torch.mm(h, wt, out=x)
            if inv_t != 1.0:
                x.mul_(inv_t)
            torch.sub(x, lse[a:b, None], out=p).exp_()
            if g_mu is not None:
                # p * (g_lse + g_mu * (1 + x - mu)), in x's buffer
                coef = x.sub_(mu[a:b, None]).add_(1.0).mul_(g_mu[a:b, None].to(x.dtype))
                if g_lse is not None:
                    coef.add_(g_lse[a:b, None].to(x.dtype))
                dx = p.mul_(coef)
            elif g_lse is not None:
                dx = p.mul_(g_lse[a:b, None].to(x.dtype))
            else:
                dx = p.zero_()
            if g_sel is not None:
                gs = torch.where(valid[a:b], g_sel[a:b].to(dx.dtype), torch.zeros((), dtype=dx.dtype))
                dx.scatter_add_(1, safe[a:b], gs)
            if inv_t != 1.0:
                dx.mul_(inv_t)
            if need_h:
                torch.mm(dx, weight, out=d_h[a:b])
            if need_w:
                d_w.addmm_(dx.t(), h)
        return d_h, d_w, None, None, None


def _buffers(hidden, weight, chunk, N):
    n = min(chunk, N)
    V = weight.shape[0]
    return hidden.new_empty(n, V), hidden.new_empty(n, V)


def _support_cols(targets: torch.Tensor, support: torch.Tensor | None) -> torch.Tensor:
    t = targets.long().unsqueeze(1)
    if support is None:
        return t
    return torch.cat([t, support.long()], dim=1)


def _masked_lse(g: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """logsumexp of each row's valid entries, 0 for a row without any. The
    empty rows are filled with zeros before the logsumexp: a row of -inf
    would give NaN gradients even where torch.where drops it."""
    has = valid.any(1, keepdim=True)
    g = torch.where(valid, g, torch.full_like(g, -math.inf))
    g = torch.where(has, g, torch.zeros_like(g))
    return torch.where(has.squeeze(1), torch.logsumexp(g, dim=1), torch.zeros(g.shape[0], dtype=g.dtype))


def token_stats(src, targets: torch.Tensor, temperature: float = 1.0, support: torch.Tensor | None = None,
                entropy_grad: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(lp, ent, support_lse) in float64 for N tokens: lp = log_softmax(
    logits / temperature)[target], ent = the entropy of that distribution,
    support_lse = log sum_{v in S} p_v over each token's support ids
    ([N, K], -1 padding; 0 for a row without ids; None without support).

    src is the [N, V] logits (the float64 reference path, as before) or a
    Projection (chunked float32, see the module doc). ent carries a
    gradient only when entropy_grad (an entropy bonus); otherwise it is a
    metric, detached."""
    if isinstance(src, Projection):
        cols = _support_cols(targets, support)
        sel, lse, mu = _ChunkedHead.apply(src.hidden, src.weight, cols, 1.0 / float(temperature), src.chunk_tokens)
        sel, lse, mu = sel.double(), lse.double(), mu.double()
        lp = sel[:, 0] - lse
        ent = lse - mu
        if not entropy_grad:
            ent = ent.detach()
        s_lse = None
        if support is not None:
            s_lse = _masked_lse(sel[:, 1:], support >= 0)
            s_lse = torch.where((support >= 0).any(1), s_lse - lse, s_lse)
        return lp, ent, s_lse
    x = src.double()
    if temperature != 1.0:  # x / 1.0 is x: skip a pass over [N, V]
        x = x / temperature
    logp_all = torch.log_softmax(x, dim=-1)
    lp = logp_all.gather(1, targets.long().unsqueeze(1)).squeeze(1)
    # the entropy over the vocabulary: a term of the loss only with an
    # entropy bonus; otherwise a metric, kept out of the graph (its backward
    # over [N, V] would add exact zeros to the gradient at several passes' cost)
    with torch.set_grad_enabled(torch.is_grad_enabled() and entropy_grad):
        ent = -(logp_all.exp() * logp_all).sum(-1)
    s_lse = None
    if support is not None:
        s_lse = _masked_lse(logp_all.gather(1, support.clamp(min=0).long()), support >= 0)
    return lp, ent, s_lse


def logprobs(src, targets: torch.Tensor) -> torch.Tensor:
    """log_softmax(logits)[target] at temperature 1, float64 [N] (Tinker's and
    SFT's logprob), from logits or a Projection."""
    return token_stats(src, targets)[0]
