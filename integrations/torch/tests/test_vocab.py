"""The chunked vocabulary path (asyncrl_worker/vocab.py) against the float64
whole-logits path it replaces for the HF models: the exact gradient of the
chunked head (gradcheck in float64), the per-token statistics and their
gradients in float32 within stated tolerances, and whole worker steps -- every
SkyRL loss variant, SFT cross-entropy and Tinker's forward_backward -- with the
chunked path on and off."""

import math

import numpy as np
import pytest
import torch

from asyncrl_worker import vocab
from asyncrl_worker.frames import tensor_obj
from asyncrl_worker.worker import Worker

from hfutil import ARCHS, hf_init, make
from util import LOSS, batch_arrays, toy_sequences, train_frame

# Tolerances of the float32 chunked statistics against float64 on these
# tiny shapes (|logits| up to ~10, vocab 256 / 2,000): logprob and entropy
# 2e-5 absolute; gradients 1e-4 relative to their largest entry. The
# measured errors on real shapes are in bench/results/lora.md.
LP_TOL = 2e-5
GRAD_TOL = 1e-4


def _problem(N=9, H=6, V=40, K=3, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = (torch.randn(N, H, generator=g, dtype=dtype) * 2).requires_grad_()
    weight = (torch.randn(V, H, generator=g, dtype=dtype)).requires_grad_()
    targets = torch.randint(0, V, (N,), generator=g)
    support = torch.randint(0, V, (N, K), generator=g)
    support[:, 0] = targets
    support[1, 1:] = -1  # padding
    support[2, :] = -1  # no set: the whole vocabulary
    return hidden, weight, targets, support


def test_chunked_head_gradient_is_exact():
    """In float64 the chunked head is exact: gradcheck of (sel, lse, mu)
    w.r.t. hidden and weight, over several chunks and a temperature."""
    hidden, weight, targets, support = _problem()
    cols = torch.cat([targets[:, None], support], 1)
    for inv_t in (1.0, 1 / 0.7):
        assert torch.autograd.gradcheck(lambda h, w: vocab._ChunkedHead.apply(h, w, cols, inv_t, 4),
                                        (hidden, weight), eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("entropy_grad", [False, True])
def test_token_stats_match_the_float64_logits(temperature, entropy_grad):
    """Projection (float32, chunks of 4 tokens) vs the logits in float64: the
    logprob, the entropy and the support log-mass within LP_TOL, and the
    gradients of a loss that uses all three within GRAD_TOL."""
    h64, w64, targets, support = _problem(N=11, H=16, V=2000, K=4, seed=1)
    h32 = h64.detach().float().requires_grad_()
    w32 = w64.detach().float().requires_grad_()
    g = torch.Generator().manual_seed(5)
    coef = [torch.randn(11, generator=g, dtype=torch.float64) for _ in range(3)]

    def run(src, h, w):
        lp, ent, s_lse = vocab.token_stats(src, targets, temperature, support, entropy_grad=entropy_grad)
        loss = (coef[0] * lp).sum() + (coef[1] * s_lse).sum() + (coef[2] * ent).sum()
        loss.backward()
        return lp.detach(), ent.detach(), s_lse.detach(), h.grad, w.grad

    # the reference: the same float32 inputs, the logits and everything after in float64
    hr = h32.detach().double().requires_grad_()
    wr = w32.detach().double().requires_grad_()
    want = run(hr @ wr.t(), hr, wr)
    got = run(vocab.Projection(h32, w32, chunk_tokens=4), h32, w32)
    for name, a, b in zip(("lp", "ent", "support"), got[:3], want[:3]):
        assert float((a - b).abs().max()) < LP_TOL, name
    assert float(want[2][2]) == 0.0 and float(got[2][2]) == 0.0  # a row without a set
    for name, a, b in zip(("hidden", "weight"), got[3:], want[3:]):
        err = float((a.double() - b).abs().max() / b.abs().max())
        assert err < GRAD_TOL, (name, err)
    if not entropy_grad:  # the entropy, a metric, adds nothing to the gradient
        hr2 = h32.detach().double().requires_grad_()
        lp, ent, s_lse = vocab.token_stats(hr2 @ wr.detach().t(), targets, temperature, support)
        ((coef[0] * lp).sum() + (coef[1] * s_lse).sum()).backward()
        assert torch.allclose(hr2.grad, want[3])


def test_projection_never_forms_the_whole_logits(monkeypatch):
    """The largest matmul output the chunked path makes is [chunk, V]."""
    hidden, weight, targets, _ = _problem(N=10, H=8, V=300, dtype=torch.float32)
    sizes = []
    real_mm = torch.mm

    def spy(a, b, *rest, **kw):
        out = real_mm(a, b, *rest, **kw)
        sizes.append(out.numel())
        return out

    monkeypatch.setattr(torch, "mm", spy)
    lp, _, _ = vocab.token_stats(vocab.Projection(hidden, weight, chunk_tokens=3), targets)
    lp.sum().backward()
    assert sizes and max(sizes) <= 3 * 300 < 10 * 300


LOSS_VARIANTS = [
    {},
    {"policy_loss_type": "dual_clip", "loss_reduction": "sequence_mean", "tis_ratio_type": "token"},
    {"policy_loss_type": "gspo", "loss_reduction": "seq_mean_token_sum_norm", "max_seq_len": 32},
    {"policy_loss_type": "cispo", "loss_reduction": "prompt_mean"},
    {"loss_reduction": "token_mean_legacy", "tis_ratio_type": "sequence", "kl_coef": 0.1},
    {"entropy_coef": 0.05, "temperature": 0.7},
    {"normalize_over_support": True},
]


def _step(tmp_path, arch, chunked, loss, frame, name):
    w = Worker()
    assert w.handle(hf_init(tmp_path / name, tmp_path / "ckpt", loss=loss))["type"] == "Ready"
    w.policy.chunked_loss = chunked
    grads = []
    real = w.opt.step

    def capture(*a, **k):
        grads.append([torch.zeros_like(p) if p.grad is None else p.grad.detach().clone() for p in w.policy.parameters()])
        return real(*a, **k)

    w.opt.step = capture
    r = w.handle(frame)
    return r, grads


def _close_grads(a, b):
    for x, y in zip(a, b):
        scale = max(float(y.abs().max()), 1e-12)
        assert float((x - y).abs().max()) / scale < GRAD_TOL


@pytest.mark.parametrize("variant", range(len(LOSS_VARIANTS)))
def test_worker_step_chunked_equals_float64(tmp_path, variant):
    """Every SkyRL loss variant through the frame handler: the chunked path's
    metrics and gradients equal the float64 path's within tolerance."""
    arch = ARCHS[variant % len(ARCHS)]
    make(tmp_path / "ckpt", arch, bias_std=0.3)
    loss = {**LOSS, **LOSS_VARIANTS[variant]}
    seqs = toy_sequences()
    arrays = batch_arrays(seqs, rollout_lp=-4.0)
    if loss.get("normalize_over_support"):
        rows = []
        for prompt, gen, _, _ in seqs:
            rows += [[-1, -1, -1]] * len(prompt) + [[t, 7, 9] for t in gen]
        arrays["support"] = tensor_obj(np.array(rows, dtype=np.int32))
    frame = train_frame(1, arrays=arrays, microbatches=[[0, 3], [1, 2]])
    r64, g64 = _step(tmp_path, arch, False, loss, frame, "f64")
    r32, g32 = _step(tmp_path, arch, True, loss, frame, "chunked")
    assert r64["type"] == r32["type"] == "StepResult", (r64, r32)
    m64, m32 = r64["metrics"], r32["metrics"]
    for k in ("loss", "pg_loss", "kl", "entropy", "mismatch", "is_ratio"):
        assert math.isclose(m32[k], m64[k], rel_tol=1e-5, abs_tol=LP_TOL), (k, m32[k], m64[k])
    assert m32["clip_frac"] == m64["clip_frac"] and m32["tokens"] == m64["tokens"]
    _close_grads(g32[0], g64[0])


def test_sft_and_tinker_chunked_equal_float64(tmp_path):
    make(tmp_path / "ckpt", "qwen3")
    seqs = toy_sequences()
    toks, mask, off = [], [], [0]
    for prompt, gen, _, _ in seqs:
        toks += prompt + gen
        mask += [0] * len(prompt) + [1] * len(gen)
        off.append(len(toks))
    sft = {"v": 1, "type": "TrainBatch", "id": 2, "step": 1, "loss": "cross_entropy", "groups": [s[3] for s in seqs],
           "arrays": {"tokens": tensor_obj(np.array(toks, dtype=np.int32)),
                      "seq_offsets": tensor_obj(np.array(off, dtype=np.int64)),
                      "loss_mask": tensor_obj(np.array(mask, dtype=np.uint8))}}
    r64, g64 = _step(tmp_path, "qwen3", False, LOSS, sft, "sft64")
    r32, g32 = _step(tmp_path, "qwen3", True, LOSS, sft, "sft32")
    assert math.isclose(r32["metrics"]["loss"], r64["metrics"]["loss"], rel_tol=1e-6)
    assert math.isclose(r32["metrics"]["entropy"], r64["metrics"]["entropy"], rel_tol=1e-6)
    _close_grads(g32[0], g64[0])

    tk = {"v": 1, "type": "ForwardBackward", "id": 3, "loss": "ppo",
          "arrays": {"tokens": tensor_obj(np.array(toks, dtype=np.int32)),
                     "seq_offsets": tensor_obj(np.array(off, dtype=np.int64)),
                     "target_tokens": tensor_obj(np.array(toks[1:] + [2], dtype=np.int32)),
                     "logprobs": tensor_obj(np.full(len(toks), -5.0, dtype=np.float32)),
                     "advantages": tensor_obj(np.linspace(-1, 1, len(toks)).astype(np.float32))}}
    out = {}
    for chunked in (False, True):
        w = Worker()
        assert w.handle(hf_init(tmp_path / f"tk{chunked}", tmp_path / "ckpt"))["type"] == "Ready"
        w.policy.chunked_loss = chunked
        r = w.handle(tk)
        assert r["type"] == "ForwardBackwardResult", r
        out[chunked] = (r, [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in w.policy.parameters()])
    lp = [np.frombuffer(out[c][0]["arrays"]["logprobs"]["data"], dtype="<f4") for c in (False, True)]
    assert np.abs(lp[0] - lp[1]).max() < LP_TOL
    assert math.isclose(out[True][0]["loss"], out[False][0]["loss"], rel_tol=1e-5)
    _close_grads(out[True][1], out[False][1])
