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
from asyncrl_worker.safetensors import load_dir


def load_dir_f32(d):
    return load_dir(d, as_float32=True)
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
    def __init__(self, log=None):
        env = dict(os.environ, PYTHONPATH=PKG, OMP_NUM_THREADS="1")
        self.p = subprocess.Popen([sys.executable, "-m", "asyncrl_worker"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=log, env=env)

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


def test_ranks_leave_their_group_at_shutdown(tmp_path, ranks):
    """Each rank destroys its process group before it exits (torch 1.13's
    gloo group left to the interpreter's exit could abort the process after
    Bye), and exits 0."""
    logs = [open(tmp_path / f"rank{r}.log", "w+") for r in range(2)]
    ranks += [Rank(logs[0]), Rank(logs[1])]
    port = free_port()
    for r, w in enumerate(ranks):
        w.send({**init_frame(tmp_path / "out"), "group": group(r, 2, port)})
    assert [w.recv()["type"] for w in ranks] == ["Ready", "Ready"]
    for r, w in enumerate(ranks):
        w.send({"v": 1, "type": "Shutdown", "id": 7})
    for r, w in enumerate(ranks):
        assert w.recv()["type"] == "Bye"
        assert w.p.wait(30) == 0, f"rank {r} exited {w.p.returncode}"
    for r, f in enumerate(logs):
        f.seek(0)
        assert f"left the process group (rank {r} of 2)" in f.read(), f"rank {r} did not leave its group"
        f.close()


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


def start_group(tmp_path, out, ranks, n=2, **kw):
    port = free_port()
    ranks += [Rank() for _ in range(n)]
    for r, w in enumerate(ranks[-n:]):
        w.send({**init_frame(tmp_path / out, **kw), "group": group(r, n, port)})
    reps = [w.recv() for w in ranks[-n:]]
    assert [r["type"] for r in reps] == ["Ready"] * n, reps
    return ranks[-n:]


def group_step(ws, step, seqs, arrays, micro, owner):
    f = {**train_frame(step, rid=10 + step, seqs=seqs, arrays=arrays, microbatches=micro), "microbatch_ranks": owner}
    for w in ws:
        w.send(f)
    reps = [w.recv() for w in ws]
    assert all(r["type"] == "StepResult" for r in reps), reps
    return reps[0]


def test_group_state_is_sharded_and_resumes_bit_for_bit(tmp_path, ranks):
    """Each rank writes its shard of the optimiser state, rank 0 the weights
    and the manifest; a new group resumed from step 2's state trains step 3
    bit for bit as the group that never stopped, and one worker resumes the
    same state (resharding 2 → 1) within float error."""
    seqs, micro, owner = batch(), [[0, 1, 2], [3], [4, 5], [6, 7]], [0, 1, 0, 1]
    arrays = batch_arrays(seqs)
    a = start_group(tmp_path, "a", ranks)
    res = [group_step(a, s, seqs, arrays, micro, owner) for s in (1, 2, 3)]
    st2 = res[1]["state"]
    assert sorted(os.listdir(st2)) == ["config.json", "manifest.json", "model.safetensors",
                                       "optimizer-00000-of-00002.pt", "optimizer-00001-of-00002.pt"]
    parts = [torch.load(os.path.join(st2, f"optimizer-0000{r}-of-00002.pt")) for r in (0, 1)]
    assert parts[0]["params"] and parts[1]["params"] and not set(parts[0]["params"]) & set(parts[1]["params"])
    for w in a:
        w.close()

    b = start_group(tmp_path, "b", ranks, resume=st2, step=2)
    rb = group_step(b, 3, seqs, arrays, micro, owner)
    assert rb["metrics"] == res[2]["metrics"]
    wa, _ = load_dir_f32(res[2]["state"])
    wb, _ = load_dir_f32(rb["state"])
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)

    one = Worker()
    assert one.handle(init_frame(tmp_path / "c", resume=st2, step=2))["type"] == "Ready"
    rc = one.handle(train_frame(3, seqs=seqs, arrays=arrays, microbatches=micro))
    assert rc["type"] == "StepResult", rc
    assert rc["metrics"]["loss"] == pytest.approx(res[2]["metrics"]["loss"], rel=1e-5, abs=1e-7)
    wc, _ = load_dir_f32(rc["state"])
    assert all(torch.allclose(wa[k], wc[k], atol=1e-6) for k in wa)


def test_group_state_with_a_missing_shard_is_refused(tmp_path, ranks):
    seqs = batch()
    a = start_group(tmp_path, "a", ranks)
    r = group_step(a, 1, seqs, batch_arrays(seqs), [[0, 1, 2, 3], [4, 5, 6, 7]], [0, 1])
    os.remove(os.path.join(r["state"], "optimizer-00001-of-00002.pt"))
    w = Worker()
    rep = w.handle(init_frame(tmp_path / "b", resume=r["state"], step=1))
    assert (rep["type"], rep["code"], rep["field"]) == ("Error", "bad_field", "resume"), rep
    assert "optimizer-00001-of-00002.pt" in rep["message"] and "cannot be resumed" in rep["message"]
    assert w.policy is None
