"""TrainBatch's optional replay arrays (issue 19): support sets with
normalize_over_support, and routes refused by a dense model. The numbers
are cross-checked against Go's trainer in
actors/trainer/bridge/replay_test.go (checkReplayAgree)."""

import math

import numpy as np
import torch

from asyncrl_worker.frames import tensor_obj
from asyncrl_worker.loss import LossConfig, support_lse, token_loss
from asyncrl_worker.worker import Worker

from util import LOSS, batch_arrays, init_frame, toy_sequences, train_frame


def test_support_lse_is_log_mass_of_the_set():
    logp = torch.log_softmax(torch.tensor([[1.0, 2.0, 3.0, 0.5], [0.0, 0.0, 0.0, 0.0]], dtype=torch.float64), -1)
    sup = torch.tensor([[2, 0, -1], [-1, -1, -1]])
    got = support_lse(logp, sup)
    p = logp.exp()
    assert math.isclose(float(got[0]), math.log(float(p[0, 2] + p[0, 0])), rel_tol=1e-12)
    assert float(got[1]) == 0.0  # no ids: the full vocabulary


def test_token_loss_normalises_over_support():
    logits = torch.tensor([[1.0, 2.0, 3.0, 0.5]], dtype=torch.float64)
    args = (logits, torch.tensor([1]), torch.tensor([-1.0]), torch.tensor([1.0]), torch.tensor([1.0]),
            torch.tensor([0]), 1)
    sup = torch.tensor([[1, 2, -1]])
    on = token_loss(LossConfig(normalize_over_support=True, temperature=0.7), *args, support=sup)
    off = token_loss(LossConfig(normalize_over_support=False, temperature=0.7), *args, support=sup)
    lp = torch.log_softmax(logits / 0.7, -1)[0]
    want = float(lp[1] - torch.logsumexp(lp[[1, 2]], 0))
    # mismatch = |lp - rollout| with rollout -1
    assert math.isclose(on.mismatch_sum, abs(want + 1.0), rel_tol=1e-9)
    assert math.isclose(off.mismatch_sum, abs(float(lp[1]) + 1.0), rel_tol=1e-9)


def _worker(tmp_path, normalize=True):
    w = Worker()
    loss = dict(LOSS, normalize_over_support=normalize)
    assert w.handle(init_frame(tmp_path, loss=loss))["type"] == "Ready"
    return w


def _support(seqs, k=3, drop_sampled=False):
    rows = []
    for prompt, gen, _, _ in seqs:
        rows += [[-1] * k for _ in prompt]
        for tok in gen:
            rows.append([5 if drop_sampled else tok, 6, -1])
    return tensor_obj(np.array(rows, dtype=np.int32))


def test_support_array_trains_and_is_checked(tmp_path):
    seqs = toy_sequences()
    w = _worker(tmp_path)
    arrays = batch_arrays(seqs)
    arrays["support"] = _support(seqs, drop_sampled=True)
    r = w.handle(train_frame(1, arrays=arrays))
    assert r["type"] == "Error" and r["field"] == "arrays.support" and "not in its support set" in r["message"]
    arrays["support"] = _support(seqs)
    r = w.handle(train_frame(1, arrays=arrays))
    assert r["type"] == "StepResult", r
    # the same batch without normalize_over_support trains on other logprobs
    plain = _worker(tmp_path / "plain", normalize=False).handle(train_frame(1, arrays=arrays))
    assert plain["type"] == "StepResult", plain
    assert plain["metrics"]["mismatch"] != r["metrics"]["mismatch"]


def test_routes_refused_by_a_dense_model(tmp_path):
    seqs = toy_sequences()
    w = _worker(tmp_path, normalize=False)
    arrays = batch_arrays(seqs)
    T = sum(len(p) + len(g) for p, g, _, _ in seqs)
    arrays["routes"] = tensor_obj(np.zeros((T, 2, 1), dtype=np.int32))
    r = w.handle(train_frame(1, arrays=arrays))
    assert r["type"] == "Error" and r["field"] == "arrays.routes" and "no routed experts" in r["message"]
