"""A data-parallel group of real worker processes on gloo (Init.group,
TrainBatch.microbatch_ranks): two ranks train what one rank trains, a rank
that never joins fails the others' Init, and a group refuses a batch
without a rank per microbatch."""

import os
import socket
import subprocess
import sys

import pytest
import torch

from asyncrl_worker.frames import encode_frame, read_frame
from asyncrl_worker.model import load_serving
from asyncrl_worker.worker import Worker
from util import batch_arrays, init_frame, toy_sequences, train_frame

dist = pytest.importorskip("torch.distributed")
if not (dist.is_available() and dist.is_gloo_available()):
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Rank:
    def __init__(self):
        env = dict(os.environ, PYTHONPATH=PKG, OMP_NUM_THREADS="1")
        self.p = subprocess.Popen([sys.executable, "-m", "asyncrl_worker"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, env=env)

    def send(self, frame):
        self.p.stdin.write(encode_frame(frame))
        self.p.stdin.flush()

    def recv(self):
        return read_frame(self.p.stdout)

    def close(self):
        self.p.kill()
        self.p.wait(10)


def group(rank, world, port, timeout=30.0):
    return {"rank": rank, "world_size": world, "addr": "127.0.0.1", "port": port, "timeout_s": timeout}


def batch():
    """Eight sequences of unequal lengths, two prompts' groups."""
    base = toy_sequences()
    seqs = base + [(p + [5], g + [9, 9], r, grp + "b") for p, g, r, grp in base]
    return seqs


@pytest.fixture
def ranks():
    rs = []
    yield rs
    for r in rs:
        r.close()


def test_two_ranks_train_like_one(tmp_path, ranks):
    seqs = batch()
    arrays = batch_arrays(seqs)
    micro = [[0, 1, 2], [3], [4, 5], [6, 7]]
    one = Worker()
    assert one.handle(init_frame(tmp_path / "one"))["type"] == "Ready"
    ranks += [Rank(), Rank()]
    port = free_port()
    for r, w in enumerate(ranks):
        w.send({**init_frame(tmp_path / "two"), "group": group(r, 2, port)})
    for w in ranks:
        rep = w.recv()
        assert rep["type"] == "Ready", rep
    for step in range(1, 4):
        f = train_frame(step, rid=10 + step, seqs=seqs, arrays=arrays, microbatches=micro)
        ref = one.handle(f)
        assert ref["type"] == "StepResult", ref
        for w in ranks:
            w.send({**f, "microbatch_ranks": [0, 1, 0, 1]})
        reps = [w.recv() for w in ranks]
        for r, rep in enumerate(reps):
            assert rep["type"] == "StepResult", rep
            assert rep["rank"]["rank"] == r and rep["rank"]["world_size"] == 2
            assert rep["rank"]["allreduce_s"] > 0 and rep["rank"]["memory_bytes"] > 0
            # the whole mini-batch's metrics on every rank, one rank's within float error
            for k in ("loss", "pg_loss", "grad_norm", "entropy", "kl", "mismatch"):
                assert rep["metrics"][k] == pytest.approx(ref["metrics"][k], rel=1e-5, abs=1e-7), (step, k)
            assert rep["metrics"]["tokens"] == ref["metrics"]["tokens"]
            assert rep["checkpoint"] == reps[0]["checkpoint"] and rep["state"] == reps[0]["state"]
    # rank 0 wrote version 3; its weights are one rank's within float error
    got = load_serving(reps[0]["checkpoint"])
    want = load_serving(ref["checkpoint"])
    for a, b in zip(got.parameters(), want.parameters()):
        assert torch.allclose(a, b, atol=1e-2)  # BF16 serving copies
    for a, b in zip(got.parameters(), one.policy.parameters()):
        assert torch.allclose(a, b.to(torch.bfloat16).float(), atol=1e-2)


def test_rank_that_never_joins_fails_the_init(tmp_path, ranks):
    ranks.append(Rank())
    port = free_port()
    ranks[0].send({**init_frame(tmp_path / "out"), "group": group(0, 2, port, timeout=2.0)})
    rep = ranks[0].recv()
    assert (rep["type"], rep["code"], rep["field"]) == ("Error", "bad_field", "group"), rep
    assert f"127.0.0.1:{port}" in rep["message"] and "did not join" in rep["message"]


def test_group_needs_a_rank_per_microbatch(tmp_path, ranks):
    ranks += [Rank(), Rank()]
    port = free_port()
    for r, w in enumerate(ranks):
        w.send({**init_frame(tmp_path / "out"), "group": group(r, 2, port)})
    assert [w.recv()["type"] for w in ranks] == ["Ready", "Ready"]
    f = train_frame(1, microbatches=[[0, 1], [2, 3]])
    for w in ranks:
        w.send(f)
    for w in ranks:
        rep = w.recv()
        assert (rep["type"], rep["field"]) == ("Error", "microbatch_ranks"), rep
    for w in ranks:
        w.send({**f, "microbatch_ranks": [0, 2]})
    for w in ranks:
        rep = w.recv()
        assert (rep["type"], rep["field"]) == ("Error", "microbatch_ranks[1]"), rep
    # nothing was applied: step 1 still trains on both
    for w in ranks:
        w.send({**f, "id": 9, "microbatch_ranks": [1, 0]})
    assert [w.recv()["type"] for w in ranks] == ["StepResult", "StepResult"]


def test_group_field_is_checked(tmp_path):
    w = Worker()
    rep = w.handle({**init_frame(tmp_path / "out"), "group": {**group(2, 2, 1234)}})
    assert (rep["type"], rep["field"]) == ("Error", "group.rank"), rep
    rep = w.handle({**init_frame(tmp_path / "out"), "group": {**group(0, 2, 1234), "nodes": 2}})
    assert (rep["type"], rep["field"]) == ("Error", "group.nodes"), rep
    assert w.policy is None
