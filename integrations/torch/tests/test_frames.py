"""Frames: round trip, malformed input, field validation, nothing half-applied."""

import io
import struct

import cbor2
import numpy as np
import pytest
import torch

from asyncrl_worker.frames import (FrameError, encode_frame, parse_tensor, read_frame, tensor_obj)
from asyncrl_worker.worker import Worker, serve
from util import LOSS, batch_arrays, init_frame, train_frame


def run(frames, worker=None, raw=b""):
    """Feed encoded frames (plus raw bytes) through serve; return the replies."""
    data = raw + b"".join(encode_frame(f) for f in frames)
    out = io.BytesIO()
    serve(io.BytesIO(data), out, worker)
    buf, replies = io.BytesIO(out.getvalue()), []
    while True:
        try:
            replies.append(read_frame(buf))
        except Exception:
            return replies


def params(w):
    return [p.detach().clone() for p in w.policy.parameters()]


def same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b))


def test_tensor_round_trip_all_dtypes():
    for dt, vals in [("int32", [1, -2, 3]), ("int64", [[1 << 40, -1]]), ("uint8", [0, 255]), ("float32", [[0.5, -1.25, 3.0]])]:
        a = np.array(vals, dtype=dt)
        obj = tensor_obj(a)
        assert obj["dtype"] == dt and obj["shape"] == list(a.shape)
        back = parse_tensor(cbor2.loads(cbor2.dumps(obj)), "x")
        assert back.dtype == a.dtype and np.array_equal(back, a)
    t = parse_tensor(tensor_obj(torch.tensor([1.5, 2.5])), "x", "float32", 1)
    assert t.tolist() == [1.5, 2.5]


def test_frame_round_trip_and_length_prefix():
    f = {"v": 1, "type": "Shutdown", "id": 9, "blob": b"\x00\x01"}
    b = encode_frame(f)
    assert struct.unpack("<I", b[:4])[0] == len(b) - 4
    assert read_frame(io.BytesIO(b)) == f


def test_parse_tensor_errors_name_the_field():
    good = tensor_obj(np.zeros(3, dtype=np.float32))
    with pytest.raises(FrameError) as e:
        parse_tensor(good, "arrays.rollout_logprobs", "int32")
    assert (e.value.code, e.value.field) == ("bad_field", "arrays.rollout_logprobs")
    with pytest.raises(FrameError) as e:
        parse_tensor({**good, "data": good["data"][:-1]}, "arrays.x")
    assert e.value.field == "arrays.x" and "11 bytes" in e.value.message
    with pytest.raises(FrameError) as e:
        parse_tensor({**good, "dtype": "float64"}, "arrays.y")
    assert e.value.field == "arrays.y"


def test_malformed_cbor_is_bad_frame_and_the_worker_keeps_serving(tmp_path):
    junk = b"\xff\xff\xff"
    raw = struct.pack("<I", len(junk)) + junk
    not_a_map = cbor2.dumps([1, 2])
    raw += struct.pack("<I", len(not_a_map)) + not_a_map
    replies = run([init_frame(tmp_path, rid=5)], raw=raw)
    assert [(r["type"], r.get("code"), r["id"]) for r in replies[:2]] == [("Error", "bad_frame", 0)] * 2
    assert replies[2]["type"] == "Ready" and replies[2]["id"] == 5


def test_oversized_frame_is_bad_frame():
    raw = struct.pack("<I", (1 << 30) + 1)  # stream then ends: the body can't be skipped
    buf = io.BytesIO(raw + b"x" * 10)
    with pytest.raises(Exception):
        read_frame(buf)
    # a body that is present is skipped and the stream stays in sync
    class Fake(io.RawIOBase):
        def __init__(self):
            self.left, self.tail = (1 << 30) + 1, io.BytesIO(encode_frame({"v": 1, "type": "Shutdown", "id": 3}))
            self.head = io.BytesIO(struct.pack("<I", self.left))

        def read(self, n=-1):
            h = self.head.read(n)
            if h:
                return h
            if self.left:
                k = min(n, self.left)
                self.left -= k
                return b"\0" * k
            return self.tail.read(n)
    r = Fake()
    with pytest.raises(FrameError) as e:
        read_frame(r)
    assert e.value.code == "bad_frame"
    assert read_frame(r)["type"] == "Shutdown"


def test_version_type_and_unknown_keys(tmp_path):
    w = Worker()
    assert w.handle({"v": 2, "type": "Init", "id": 1})["code"] == "unsupported_version"
    r = w.handle({"v": 1, "type": "Frobnicate", "id": 2})
    assert (r["code"], r["field"]) == ("bad_field", "type")
    f = init_frame(tmp_path)
    f["loss"]["frobnicate"] = 1
    r = w.handle(f)
    assert (r["code"], r["field"]) == ("bad_field", "loss.frobnicate")
    f = init_frame(tmp_path, loss={**LOSS, "loss_reduction": "mean"})
    assert w.handle(f)["field"] == "loss.loss_reduction"
    f = init_frame(tmp_path)
    f["optimizer"]["momentum"] = 0.9
    assert w.handle(f)["field"] == "optimizer.momentum"
    r = w.handle(train_frame(1))
    assert (r["code"], r["field"]) == ("bad_field", "type")  # no Init yet


@pytest.fixture
def ready(tmp_path):
    w = Worker()
    r = w.handle(init_frame(tmp_path / "out"))
    assert r["type"] == "Ready" and r["step"] == 0 and r["worker"]["protocol"] == 1
    return w


def test_bad_batches_are_refused_and_nothing_is_applied(ready, tmp_path):
    w = ready
    p0, opt0 = params(w), str(w.opt.state_dict())

    def refused(frame, field, text=None):
        r = w.handle(frame)
        assert r["type"] == "Error" and r["code"] == "bad_field" and r["field"] == field, r
        if text:
            assert text in r["message"], r["message"]

    arrays = batch_arrays([([1, 40], [50, 51, 52, 53, 54, 55, 56], 1.0, "g")])  # 9 tokens
    arrays["loss_mask"] = tensor_obj(np.zeros(7, dtype=np.uint8))
    refused(train_frame(1, seqs=[([1, 40], [50] * 7, 1.0, "g")], arrays=arrays), "arrays.loss_mask",
            "7 values but tokens has 9")
    a = batch_arrays([([1, 40], [50, 51], 1.0, "g")])
    a["tokens"] = tensor_obj(np.array([1, 40, 50, 51], dtype=np.int64))
    refused(train_frame(1, arrays=a), "arrays.tokens", "int32")
    a = batch_arrays([([1, 40], [50, 51], 1.0, "g")])
    a["rollout_logprobs"] = tensor_obj(np.zeros(3, dtype=np.float32))
    refused(train_frame(1, arrays=a), "arrays.rollout_logprobs", "3 values but tokens has 4")
    seqs = [([1, 40], [50, 51], 1.0, "g"), ([1, 40], [60], 0.0, "g")]
    refused(train_frame(1, seqs=seqs, microbatches=[[0]]), "microbatches", "cover 1 of 2")
    refused(train_frame(1, seqs=seqs, microbatches=[[0, 1], [1]]), "microbatches[1]")
    a = batch_arrays(seqs)
    a["advantages"] = tensor_obj(np.zeros(3, dtype=np.float32))
    refused(train_frame(1, seqs=seqs, arrays=a), "arrays.advantages", "3 values")
    refused(train_frame(2, seqs=seqs), "step")
    a = batch_arrays([([1, 40], [50, 500], 1.0, "g")])
    refused(train_frame(1, arrays=a), "arrays.tokens", "outside the vocabulary")
    a = batch_arrays(seqs)
    a["loss_mask"] = tensor_obj(np.array([1, 0, 1, 1, 0, 0, 1], dtype=np.uint8))
    refused(train_frame(1, seqs=seqs, arrays=a), "arrays.loss_mask", "first token")
    a = batch_arrays(seqs, rollout_lp=0.5)
    refused(train_frame(1, seqs=seqs, arrays=a), "arrays.rollout_logprobs", "not a log-probability")
    f = train_frame(1, seqs=seqs)
    del f["groups"]
    refused(f, "groups")  # GRPO needs the groups when advantages are absent
    f = train_frame(1, seqs=seqs)
    f["arrays"]["extra"] = f["arrays"]["tokens"]
    refused(f, "arrays.extra")
    assert same(p0, params(w)) and str(w.opt.state_dict()) == opt0 and w.step == 0
    assert not any((tmp_path / "out").iterdir())  # no checkpoint written
    # and the worker still trains afterwards
    r = w.handle(train_frame(1, seqs=seqs))
    assert r["type"] == "StepResult" and r["step"] == 1 and not same(p0, params(w))


def test_internal_error_keeps_the_previous_params(ready):
    w = ready
    p0 = params(w)
    with torch.no_grad():  # make the forward pass produce NaN without touching the checked inputs
        w.policy.net.head.bias[5] = float("nan")
    p_nan = params(w)
    r = w.handle(train_frame(1))
    assert (r["type"], r["code"]) == ("Error", "internal") and "nothing applied" in r["message"]
    after = params(w)
    assert all(torch.equal(torch.nan_to_num(x, 7.0), torch.nan_to_num(y, 7.0)) for x, y in zip(p_nan, after))
    assert w.step == 0 and all(p.grad is None for p in w.policy.parameters())
    with torch.no_grad():
        w.policy.net.head.bias[5] = p0[-1][5]
    assert w.handle(train_frame(1))["type"] == "StepResult"


def test_microbatch_split_matches_one_pass(tmp_path):
    # The loss is reduced over the whole mini-batch: any microbatch split gives
    # the same step (token_mean; here with GRPO advantages from the rewards).
    out = []
    for k, plan in enumerate([None, [[0], [1, 2], [], [3]]]):
        w = Worker()
        assert w.handle(init_frame(tmp_path / f"o{k}"))["type"] == "Ready"
        r = w.handle(train_frame(1, microbatches=plan))
        assert r["type"] == "StepResult", r
        out.append((r["metrics"], params(w)))
    (m1, p1), (m2, p2) = out
    assert m1["loss"] == pytest.approx(m2["loss"], rel=1e-9) and m1["tokens"] == m2["tokens"] == 12
    assert m1["grad_norm"] == pytest.approx(m2["grad_norm"], rel=1e-5)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(p1, p2))
