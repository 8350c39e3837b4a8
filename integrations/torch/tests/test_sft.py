"""TrainBatch loss "cross_entropy" (SFT, issue 18): the NLL of the loss-masked
tokens, no rollout logprobs, rewards or versions needed; an unknown loss name
is refused before anything is applied."""

import io

import numpy as np
import torch

from asyncrl_worker.frames import encode_frame, read_frame, tensor_obj
from asyncrl_worker.loss import cross_entropy_loss
from asyncrl_worker.worker import Worker, serve
from util import OPTIM, init_frame, toy_sequences


def run(frames, worker):
    out = io.BytesIO()
    serve(io.BytesIO(b"".join(encode_frame(f) for f in frames)), out, worker)
    buf, replies = io.BytesIO(out.getvalue()), []
    while True:
        try:
            replies.append(read_frame(buf))
        except Exception:
            return replies


def sft_frame(step, rid, loss="cross_entropy"):
    toks, mask, off = [], [], [0]
    seqs = toy_sequences()
    for prompt, gen, _, _ in seqs:
        toks += prompt + gen
        mask += [0] * len(prompt) + [1] * len(gen)
        off.append(len(toks))
    return {"v": 1, "type": "TrainBatch", "id": rid, "step": step, "loss": loss, "groups": [s[3] for s in seqs],
            "arrays": {"tokens": tensor_obj(np.array(toks, dtype=np.int32)),
                       "seq_offsets": tensor_obj(np.array(off, dtype=np.int64)),
                       "loss_mask": tensor_obj(np.array(mask, dtype=np.uint8))}}


def reference_nll(worker, frame):
    """Token-mean NLL computed directly from the model's logits in numpy."""
    a = frame["arrays"]
    toks = np.frombuffer(a["tokens"]["data"], dtype=np.int32)
    off = np.frombuffer(a["seq_offsets"]["data"], dtype=np.int64)
    mask = np.frombuffer(a["loss_mask"]["data"], dtype=np.uint8)
    total, n = 0.0, 0
    with torch.no_grad():
        for i in range(len(off) - 1):
            seq = torch.from_numpy(toks[off[i]:off[i + 1]].astype(np.int64))
            pos = np.nonzero(mask[off[i]:off[i + 1]])[0]
            logits = worker.policy.logits_at(seq, torch.from_numpy(pos)).double().numpy()
            for j, p in enumerate(pos):
                row = logits[j]
                m = row.max()
                total += -(row[int(seq[p])] - m - np.log(np.exp(row - m).sum()))
                n += 1
    return total / n


def test_cross_entropy_loss_is_weighted_nll():
    torch.manual_seed(0)
    logits = torch.randn(5, 7, dtype=torch.float64, requires_grad=True)
    targets = torch.tensor([0, 3, 6, 2, 2])
    w = torch.full((5,), 0.2, dtype=torch.float64)
    tl = cross_entropy_loss(logits, targets, w)
    want = torch.nn.functional.cross_entropy(logits, targets, reduction="mean")
    assert abs(float(tl.total) - float(want)) < 1e-12
    tl.total.backward()
    g = logits.grad.clone()
    logits.grad = None
    want.backward()
    assert torch.allclose(g, logits.grad)
    assert tl.kl_sum == 0 and tl.clipped == 0


def test_sft_step_reports_nll_and_lowers_it(tmp_path):
    w = Worker()
    r = run([init_frame(tmp_path)], w)
    assert r[0]["type"] == "Ready", r
    first = sft_frame(1, 2)
    want = reference_nll(w, first)
    r = run([first], w)
    assert r[0]["type"] == "StepResult", r
    assert abs(r[0]["metrics"]["loss"] - want) < 1e-6
    assert r[0]["metrics"]["tokens"] == sum(len(s[1]) for s in toy_sequences())
    for k in range(2, 30):
        r = run([sft_frame(k, k + 1)], w)
        assert r[0]["type"] == "StepResult", r
    assert reference_nll(w, first) < 0.85 * want


def test_unknown_loss_refused_before_anything_applies(tmp_path):
    w = Worker()
    run([init_frame(tmp_path)], w)
    before = [p.detach().clone() for p in w.policy.parameters()]
    r = run([sft_frame(1, 2, loss="mse")], w)
    assert (r[0]["type"], r[0]["code"], r[0]["field"]) == ("Error", "bad_field", "loss")
    assert all(torch.equal(a, b) for a, b in zip(before, w.policy.parameters()))
    # an RL step (no loss field) still needs its rollout logprobs
    f = sft_frame(1, 3)
    del f["loss"]
    r = run([f], w)
    assert (r[0]["type"], r[0]["field"]) == ("Error", "arrays.rollout_logprobs")


def test_warmup_scales_the_first_steps_learning_rate(tmp_path):
    """optimizer.warmup_steps (sft.warmup_steps; model.TrainerConfig.LRAt):
    step k takes lr * k / warmup_steps until k reaches it. Adam's first
    step moves each weight by ~lr (m / sqrt(v) is the gradient's sign), so
    with warmup 4 the first step moves every weight a quarter as far as
    without one, from the same weights on the same batch."""
    moves = []
    for warm in (0, 4):
        w = Worker()
        optim = dict(OPTIM, warmup_steps=warm)
        r = run([init_frame(tmp_path / f"w{warm}", optim=optim)], w)
        assert r[0]["type"] == "Ready", r
        before = [p.detach().clone() for p in w.policy.parameters()]
        r = run([sft_frame(1, 2)], w)
        assert r[0]["type"] == "StepResult", r
        moves.append(torch.cat([(p.detach() - b).flatten() for p, b in zip(w.policy.parameters(), before)]))
        if warm:
            lrs = []
            for k in range(2, 7):
                r = run([sft_frame(k, k + 1)], w)
                assert r[0]["type"] == "StepResult", r
                lrs.append(w.opt.param_groups[0]["lr"])
            assert lrs == [optim["lr"] * k / 4 for k in (2, 3)] + [optim["lr"]] * 3, lrs
    full, warm = moves
    big = full.abs() > 1e-4  # weights with a gradient worth a step
    assert int(big.sum()) > 100
    ratio = (warm[big] / full[big]).double()
    assert torch.allclose(ratio, torch.full_like(ratio, 0.25), atol=2e-3), (float(ratio.min()), float(ratio.max()))


def test_bad_warmup_refused(tmp_path):
    for bad_value in (-1, 1.5, True):
        w = Worker()
        r = run([init_frame(tmp_path, optim=dict(OPTIM, warmup_steps=bad_value))], w)
        assert (r[0]["type"], r[0]["field"]) == ("Error", "optimizer.warmup_steps"), r
