"""Tinker's ForwardBackward / OptimStep frames (asyncrl_worker.tinker)."""

import math

import numpy as np
import pytest
import torch

from asyncrl_worker.frames import parse_tensor, tensor_obj
from asyncrl_worker.model import load_serving
from asyncrl_worker.worker import Worker
from util import init_frame

DATA = [([1, 40, 41, 50, 51], [40, 41, 50, 51, 2]), ([1, 70, 71], [70, 71, 2])]
ADAM = {"lr": 0.01, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0, "grad_clip_norm": 0.0}


def make_worker(tmp_path):
    w = Worker()
    r = w.handle(init_frame(tmp_path / "out"))
    assert r["type"] == "Ready", r
    return w


def fb_frame(data, loss="cross_entropy", backward=True, extra=None, rid=3, loss_config=None):
    toks, tgt, off = [], [], [0]
    for t, y in data:
        toks += t
        tgt += y
        off.append(len(toks))
    arrays = {"tokens": tensor_obj(np.array(toks, dtype=np.int32)),
              "seq_offsets": tensor_obj(np.array(off, dtype=np.int64)),
              "target_tokens": tensor_obj(np.array(tgt, dtype=np.int32))}
    for k, v in (extra or {}).items():
        arrays[k] = tensor_obj(np.array(v, dtype=np.float32))
    f = {"v": 1, "type": "ForwardBackward", "id": rid, "loss": loss, "backward": backward, "arrays": arrays}
    if loss_config is not None:
        f["loss_config"] = loss_config
    return f


def optim(params=None, rid=4):
    return {"v": 1, "type": "OptimStep", "id": rid, **(params or ADAM)}


def reference_logprobs(w, data):
    """logp of each target from the model's next-token logits of the prefix."""
    out = []
    with torch.no_grad():
        for toks, tgt in data:
            for i in range(len(toks)):
                lg = w.policy.net.next_logits(toks[:i + 1]).double()
                out.append(float(torch.log_softmax(lg, -1)[tgt[i]]))
    return np.array(out)


def params(w):
    return [p.detach().clone() for p in w.policy.parameters()]


def test_cross_entropy_logprobs_and_loss_falls(tmp_path):
    w = make_worker(tmp_path)
    want = reference_logprobs(w, DATA)
    losses = []
    for k in range(5):
        r = w.handle(fb_frame(DATA, rid=10 + 2 * k))
        assert r["type"] == "ForwardBackwardResult", r
        lp = parse_tensor(r["arrays"]["logprobs"], "lp")
        if k == 0:
            np.testing.assert_allclose(lp, want, atol=1e-5)
            assert r["loss"] == pytest.approx(-want.sum(), abs=1e-4)
        losses.append(r["loss"])
        o = w.handle(optim(rid=11 + 2 * k))
        assert o["type"] == "OptimStepResult" and o["step"] == k + 1, o
        assert o["metrics"]["grad_norm:mean"] > 0
    assert all(b < a for a, b in zip(losses, losses[1:])), losses


def test_gradients_accumulate_until_optim_step(tmp_path):
    a, b = make_worker(tmp_path / "a"), make_worker(tmp_path / "b")
    # a: both data in one call; b: one call per datum, then one step
    assert a.handle(fb_frame(DATA))["type"] == "ForwardBackwardResult"
    assert b.handle(fb_frame(DATA[:1]))["type"] == "ForwardBackwardResult"
    assert b.handle(fb_frame(DATA[1:]))["type"] == "ForwardBackwardResult"
    ra, rb = a.handle(optim()), b.handle(optim())
    assert ra["metrics"]["grad_norm:mean"] == pytest.approx(rb["metrics"]["grad_norm:mean"], rel=1e-6)
    for p, q in zip(params(a), params(b)):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    # the step cleared the accumulator: a step with nothing accumulated does not move the weights
    before = params(a)
    assert a.handle(optim(rid=9))["metrics"]["grad_norm:mean"] == 0
    for p, q in zip(before, params(a)):
        assert torch.equal(p, q)


def test_forward_only_adds_no_gradient(tmp_path):
    w = make_worker(tmp_path)
    r = w.handle(fb_frame(DATA, backward=False))
    assert r["type"] == "ForwardBackwardResult" and r["loss"] > 0
    assert w.handle(optim())["metrics"]["grad_norm:mean"] == 0


@pytest.mark.parametrize("loss", ["importance_sampling", "ppo", "cispo"])
def test_rl_losses_match_their_definitions(tmp_path, loss):
    w = make_worker(tmp_path)
    lp = reference_logprobs(w, DATA)
    T = len(lp)
    rng = np.random.default_rng(0)
    q = (lp + rng.uniform(-0.5, 0.5, T)).astype(np.float32)  # some ratios outside [0.8, 1.2]
    adv = rng.uniform(-1, 1, T).astype(np.float32)
    r = w.handle(fb_frame(DATA, loss=loss, extra={"logprobs": q, "advantages": adv}))
    assert r["type"] == "ForwardBackwardResult", r
    ratio = np.exp(np.clip(lp - q.astype(np.float64), -20, 20))
    a = adv.astype(np.float64)
    if loss == "importance_sampling":
        el = -ratio * a
    elif loss == "ppo":
        el = -np.minimum(ratio * a, np.clip(ratio, 0.8, 1.2) * a)
    else:
        el = -np.clip(ratio, 0.8, 1.2) * a * lp
    np.testing.assert_allclose(parse_tensor(r["arrays"]["elementwise_loss"], "el"), el, rtol=1e-4, atol=1e-5)
    assert r["loss"] == pytest.approx(el.sum(), rel=1e-4, abs=1e-5)


def test_ppo_clipped_tokens_add_no_gradient(tmp_path):
    w = make_worker(tmp_path)
    lp = reference_logprobs(w, DATA)
    T = len(lp)
    # r = e ≈ 2.7 > 1.2 with A > 0: the clipped term wins everywhere
    q = (lp - 1.0).astype(np.float32)
    r = w.handle(fb_frame(DATA, loss="ppo", extra={"logprobs": q, "advantages": np.ones(T)}))
    assert r["loss"] == pytest.approx(-1.2 * T, rel=1e-5)
    assert w.handle(optim())["metrics"]["grad_norm:mean"] == 0


def test_bad_requests_are_refused_before_anything_runs(tmp_path):
    w = make_worker(tmp_path)
    f = fb_frame(DATA, loss="ppo")  # no logprobs / advantages
    r = w.handle(f)
    assert r["type"] == "Error" and r["code"] == "bad_field" and r["field"] == "arrays.logprobs", r
    r = w.handle(fb_frame(DATA, loss="dpo"))
    assert r["type"] == "Error" and r["field"] == "loss", r
    f = fb_frame(DATA)
    f["arrays"]["target_tokens"] = tensor_obj(np.array([1, 2], dtype=np.int32))
    r = w.handle(f)
    assert r["type"] == "Error" and r["field"] == "arrays.target_tokens", r
    r = w.handle(fb_frame([([1, 200], [2, 3])]))
    assert r["type"] == "Error" and r["field"] == "arrays.tokens", r
    r = w.handle(optim({**ADAM, "beta1": 1.0}))
    assert r["type"] == "Error" and r["field"] == "beta1", r
    # nothing was accumulated by the refused calls
    assert w.handle(optim(rid=20))["metrics"]["grad_norm:mean"] == 0


def test_grad_clip_norm_scales_like_gotrain(tmp_path):
    a, b = make_worker(tmp_path / "a"), make_worker(tmp_path / "b")
    a.handle(fb_frame(DATA))
    b.handle(fb_frame(DATA))
    n = a.handle(optim())["metrics"]["grad_norm:mean"]
    assert n > 0.5
    # Adam is scale-invariant on the first step except through eps, so compare the
    # clipped gradient itself: with clip n/2 the moments see half the gradient
    b.handle(optim({**ADAM, "grad_clip_norm": n / 2}))
    st_a = a.opt.state[a.policy.parameters()[0]]["exp_avg"]
    st_b = b.opt.state[b.policy.parameters()[0]]["exp_avg"]
    torch.testing.assert_close(st_b, st_a / 2, rtol=1e-5, atol=1e-9)


def test_save_checkpoint_serving(tmp_path):
    w = make_worker(tmp_path)
    w.handle(fb_frame(DATA))
    w.handle(optim())
    d = tmp_path / "sampler"
    r = w.handle({"v": 1, "type": "SaveCheckpoint", "id": 30, "dir": str(d), "serving": True})
    assert r["type"] == "Saved" and r["step"] == 1, r
    net = load_serving(str(d))
    for (name, p), q in zip(w.policy.net.named_tensors().items(), net.named_tensors().values()):
        # BF16 serving copy of the trained weights
        torch.testing.assert_close(q.float(), p.detach().to(torch.bfloat16).float(), msg=name)
    r = w.handle({"v": 1, "type": "SaveCheckpoint", "id": 31, "dir": str(d), "serving": 1})
    assert r["type"] == "Error" and r["field"] == "serving"
    assert math.isfinite(r.get("id", 0))
