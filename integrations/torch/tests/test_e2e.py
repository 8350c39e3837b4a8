"""End to end: python3 -m asyncrl_worker over real pipes, plus the recovery
path (resume from a state dir) and the direction of an RL step in-process."""

import io
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from asyncrl_worker.frames import encode_frame, read_frame
from asyncrl_worker.model import load_serving
from asyncrl_worker.worker import Worker
from util import LOSS, batch_arrays, init_frame, toy_sequences, train_frame

PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Runs the real entry point (asyncrl_worker.__main__.main) but makes every
# request print to Python's stdout and write to fd 1 first, as a chatty
# library would: the frame stream on the real stdout must stay clean.
NOISY = """
import os, sys
import asyncrl_worker.worker as w
from asyncrl_worker.__main__ import main
orig = w.Worker.handle
def handle(self, req):
    print("noise from print")
    os.write(1, b"noise on fd 1\\n")
    return orig(self, req)
w.Worker.handle = handle
sys.exit(main())
"""


def test_worker_process_end_to_end(tmp_path):
    env = dict(os.environ, PYTHONPATH=PKG, OMP_NUM_THREADS="1")
    p = subprocess.Popen([sys.executable, "-c", NOISY], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env)

    def call(frame):
        p.stdin.write(encode_frame(frame))
        p.stdin.flush()
        r = read_frame(p.stdout)
        assert r["v"] == 1 and r["id"] == frame["id"]
        return r

    out = tmp_path / "out"
    try:
        # KL toward fixed rollout logprobs (log 0.9 for every generated token)
        # with zero advantages: the loss is the k3 KL and must fall as the policy fits.
        r = call(init_frame(out, loss={**LOSS, "kl_coef": 1.0}))
        assert r["type"] == "Ready" and r["step"] == 0 and r["worker"]["name"] == "asyncrl_worker"
        seqs = toy_sequences()
        arrays = batch_arrays(seqs, rollout_lp=float(np.log(0.9)), with_adv=[0.0] * len(seqs))
        bad = call({"v": 1, "type": "TrainBatch", "id": 3, "step": 1, "arrays": {}})
        assert (bad["type"], bad["code"], bad["field"]) == ("Error", "bad_field", "arrays.tokens")
        losses = []
        for step in range(1, 6):
            r = call(train_frame(step, rid=10 + step, arrays=arrays))
            assert r["type"] == "StepResult", r
            assert r["step"] == step and r["metrics"]["tokens"] == 12
            assert set(r["metrics"]) == {"loss", "pg_loss", "clip_frac", "kl", "grad_norm", "entropy", "mismatch", "is_ratio",
                                         "mismatch_same_version", "same_version_tokens", "tokens"}
            assert r["checkpoint"] == str(out / f"v{step:08d}") and r["state"] == str(out / f"state-v{step:08d}")
            assert sorted(os.listdir(r["checkpoint"])) == ["config.json", "model.safetensors"]
            assert sorted(os.listdir(r["state"])) == ["config.json", "model.safetensors", "optimizer.pt"]
            assert r["metrics"]["kl"] == pytest.approx(r["metrics"]["loss"], rel=1e-6)  # A = 0, entropy_coef 0
            losses.append(r["metrics"]["loss"])
        assert all(b < a for a, b in zip(losses, losses[1:])), losses
        assert losses[-1] < 0.8 * losses[0], losses
        saved = call({"v": 1, "type": "SaveCheckpoint", "id": 50, "dir": str(tmp_path / "manual")})
        assert saved == {"v": 1, "type": "Saved", "id": 50, "dir": str(tmp_path / "manual"), "step": 5}
        assert sorted(os.listdir(tmp_path / "manual")) == ["config.json", "model.safetensors", "optimizer.pt"]
        assert call({"v": 1, "type": "Shutdown", "id": 51}) == {"v": 1, "type": "Bye", "id": 51}
        assert p.wait(timeout=60) == 0
        assert p.stdout.read() == b""  # nothing but frames
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()
        err = p.stderr.read().decode()
        for f in (p.stdin, p.stdout, p.stderr):
            f.close()
    assert "noise from print" in err and "noise on fd 1" in err
    assert "Traceback" not in err, err


def seq_logprob(model, tokens, mask):
    t = torch.tensor(tokens)
    pos = torch.tensor([i for i, m in enumerate(mask) if m])
    with torch.no_grad():
        lp = torch.log_softmax(model.logits_at(t, pos).double(), -1)
    return float(lp.gather(1, t[pos].unsqueeze(1)).sum())


@pytest.mark.parametrize("ptype", ["regular", "gspo", "cispo"])
def test_rl_steps_move_probability_to_rewarded_answers(tmp_path, ptype):
    w = Worker()
    assert w.handle(init_frame(tmp_path, loss={**LOSS, "policy_loss_type": ptype,
                                               "loss_reduction": "sequence_mean"}))["type"] == "Ready"
    before = load_serving(w.handle(train_frame(1))["checkpoint"])
    for step in range(2, 5):
        r = w.handle(train_frame(step))
        assert r["type"] == "StepResult", r
    after = load_serving(r["checkpoint"])
    for prompt, gen, reward, _ in toy_sequences():
        toks, mask = prompt + gen, [0] * len(prompt) + [1] * len(gen)
        delta = seq_logprob(after, toks, mask) - seq_logprob(before, toks, mask)
        assert (delta > 0) == (reward > 0.5), (gen, reward, delta)


def test_restart_from_state_repeats_the_step_exactly(tmp_path):
    # The Go bridge's recovery: a fresh child Init'ed with resume = the last
    # state dir and step = its version retrains the next batch to the same weights.
    a = Worker()
    assert a.handle(init_frame(tmp_path / "a"))["type"] == "Ready"
    for step in (1, 2):
        assert a.handle(train_frame(step))["type"] == "StepResult"
    r3 = a.handle(train_frame(3))
    b = Worker()
    assert b.handle(init_frame(tmp_path / "b", resume=str(tmp_path / "a" / "state-v00000002"), step=2))["step"] == 2
    bad = b.handle(train_frame(2))
    assert (bad["code"], bad["field"]) == ("bad_field", "step")
    r3b = b.handle(train_frame(3))
    assert r3["metrics"]["loss"] == pytest.approx(r3b["metrics"]["loss"], rel=1e-12)
    x, y = load_serving(r3["state"]), load_serving(r3b["state"])
    for p, q in zip(x.named_tensors().values(), y.named_tensors().values()):
        assert torch.equal(p, q)
    # the state's step must match the Init's step
    r = Worker().handle(init_frame(tmp_path / "c", resume=str(tmp_path / "a" / "state-v00000002"), step=1))
    assert (r["code"], r["field"]) == ("bad_field", "step")
    # a state dir also loads as initial weights (fp32): model.path
    w = Worker()
    assert w.handle(init_frame(tmp_path / "d", path=str(tmp_path / "a" / "state-v00000003"), config=None))["type"] == "Ready"
    for p, q in zip(w.policy.net.named_tensors().values(), x.named_tensors().values()):
        assert torch.equal(p.detach(), q.detach())


def test_init_config_must_agree_with_the_checkpoint(tmp_path):
    w = Worker()
    assert w.handle(init_frame(tmp_path / "a"))["type"] == "Ready"
    r = w.handle(train_frame(1))
    other = {**load_serving(r["checkpoint"]).cfg, "hidden": 8}
    r = Worker().handle(init_frame(tmp_path / "b", path=r["checkpoint"], config=other))
    assert (r["code"], r["field"]) == ("bad_field", "model.config")
    r = Worker().handle(init_frame(tmp_path / "b", path=str(tmp_path / "nope"), config=None))
    assert (r["code"], r["field"]) == ("bad_field", "model.path")


def test_init_removes_temporaries_of_a_killed_child(tmp_path):
    out = tmp_path / "out"
    (out / ".v00000003.tmp-abc").mkdir(parents=True)
    (out / ".state-v00000003.tmp-xyz").mkdir()
    (out / "v00000002").mkdir()
    (out / ".keep.tmp-1").mkdir()
    assert Worker().handle(init_frame(out))["type"] == "Ready"
    assert sorted(os.listdir(out)) == [".keep.tmp-1", "v00000002"]
