import json
import os
import shutil

import pytest
import torch

from asyncrl_vllm import WorkerExtension
from asyncrl_vllm import delta as d
from asyncrl_vllm.state import StateError, WeightState
from helpers import FakeModelRunner, TinyModel, bytes_of, encode_delta, perturb, raw, write_ckpt

SPECS = {
    "model.embed_tokens.weight": (torch.bfloat16, (10, 4)),
    "model.layers.0.mlp.down_proj.weight": (torch.float32, (4, 6)),
    "model.layers.0.mlp.down_proj.bias": (torch.float32, (4,)),
    "model.norm.weight": (torch.float16, (4,)),
    "model.pos_ids": (torch.int64, (5,)),
}


def v0():
    g = torch.Generator().manual_seed(3)
    out = {}
    for n, (dt, shape) in SPECS.items():
        out[n] = torch.randn(shape, generator=g).to(dt) if dt.is_floating_point else torch.arange(5, dtype=dt)
    return out


def next_version(prev, seed):
    # the bias never changes: it is absent from every delta
    return {n: (t if n.endswith("bias") else perturb(t, seed + i, frac=0.3)) for i, (n, t) in enumerate(prev.items())}


@pytest.fixture
def chain(tmp_path):
    """v0 checkpoint dir, deltas 1..3 under root, and the tensors of each version."""
    vs = [v0()]
    for k in range(1, 4):
        vs.append(next_version(vs[-1], 10 * k))
    ck = write_ckpt(str(tmp_path / "v0"), vs[0], max_shard_bytes=100)  # sharded
    root = str(tmp_path / "sync")
    for k in range(1, 4):
        encode_delta(raw(vs[k - 1]), raw(vs[k]), k, root)
    return ck, root, vs


def worker():
    w = WorkerExtension()
    w.model_runner = FakeModelRunner(TinyModel(SPECS))
    return w


def params(w):
    return {n: bytes_of(t) for n, t in w.model_runner.model.state_dict().items()}


def expect(tensors):
    return {n: bytes_of(t) for n, t in tensors.items()}


def test_load_checkpoint_through_load_weights(chain):
    ck, _, vs = chain
    w = worker()
    assert w.asyncrl_loaded_version() == -1
    assert w.asyncrl_load_checkpoint(ck, 0) == {"version": 0, "tensors": len(SPECS)}
    assert sorted(w.model_runner.model.loaded) == sorted(SPECS)
    assert params(w) == expect(vs[0])
    for n, t in vs[0].items():
        assert torch.equal(w.model_runner.model.tensor(n), t)
    assert w.asyncrl_loaded_version() == 0


def test_replay_chain_bit_exact(chain):
    ck, root, vs = chain
    w = worker()
    w.asyncrl_load_checkpoint(ck, 0)
    for k in (1, 2, 3):
        w.model_runner.model.loaded.clear()
        # the version directory itself, or the sync root holding it
        where = os.path.join(root, d.delta_dir_name(k)) if k % 2 else root
        r = w.asyncrl_apply_delta(where, k)
        assert r["version"] == k and r["skipped"] == []
        assert "model.layers.0.mlp.down_proj.bias" not in w.model_runner.model.loaded
        assert params(w) == expect(vs[k])
        assert w.asyncrl_loaded_version() == k
    # retried call: a no-op that says so
    assert w.asyncrl_apply_delta(root, 3)["already_applied"] is True
    assert params(w) == expect(vs[3])


@pytest.mark.parametrize("version,err,msg", [
    (2, d.ChainError, "apply version 1 first"),
    (5, d.ChainError, "apply version 1 first"),
])
def test_out_of_order_version_refused(chain, version, err, msg):
    ck, root, vs = chain
    w = worker()
    w.asyncrl_load_checkpoint(ck, 0)
    with pytest.raises(err, match=msg):
        w.asyncrl_apply_delta(root, version)
    assert params(w) == expect(vs[0]) and w.asyncrl_loaded_version() == 0


def test_lower_version_refused(chain):
    ck, root, vs = chain
    w = worker()
    w.asyncrl_load_checkpoint(ck, 0)
    w.asyncrl_apply_delta(root, 1)
    w.asyncrl_apply_delta(root, 2)
    with pytest.raises(d.ChainError, match="already at version 2"):
        w.asyncrl_apply_delta(root, 1)
    assert params(w) == expect(vs[2])


def test_manifest_version_mismatch_refused(chain):
    ck, root, vs = chain
    # delta-00000001 whose manifest claims version 2
    p = os.path.join(root, d.delta_dir_name(1), "manifest.json")
    m = json.load(open(p))
    m["version"], m["base_version"] = 2, 1
    json.dump(m, open(p, "w"))
    w = worker()
    w.asyncrl_load_checkpoint(ck, 0)
    with pytest.raises(d.ChainError, match="says version 2"):
        w.asyncrl_apply_delta(os.path.join(root, d.delta_dir_name(1)), 1)
    assert params(w) == expect(vs[0]) and w.asyncrl_loaded_version() == 0


def test_corrupt_delta_leaves_params_and_state_unchanged_then_good_copy_applies(chain, tmp_path):
    ck, root, vs = chain
    good = str(tmp_path / "good")
    shutil.copytree(os.path.join(root, d.delta_dir_name(1)), good)
    p = os.path.join(root, d.delta_dir_name(1), "manifest.json")
    m = json.load(open(p))
    m["tensors"][-1]["checksum"] = "f" * 32
    json.dump(m, open(p, "w"))
    w = worker()
    w.asyncrl_load_checkpoint(ck, 0)
    w.model_runner.model.loaded.clear()
    with pytest.raises(d.ChecksumError, match=m["tensors"][-1]["name"]):
        w.asyncrl_apply_delta(root, 1)
    assert w.model_runner.model.loaded == []  # load_weights never called
    assert params(w) == expect(vs[0]) and w.asyncrl_loaded_version() == 0
    assert w.asyncrl_apply_delta(good, 1)["version"] == 1
    assert params(w) == expect(vs[1])


def test_delta_before_any_load_refused(chain):
    _, root, _ = chain
    with pytest.raises(StateError, match="asyncrl_load_checkpoint"):
        worker().asyncrl_apply_delta(root, 1)


def test_adopts_the_served_checkpoint_for_version_1(chain):
    ck, root, vs = chain
    w = worker()
    # vLLM started from ck: the live params already hold it; the state only reads it
    w.model_runner.model.load_weights(list(vs[0].items()))
    w.model_config = type("MC", (), {"model": ck})()
    assert w.asyncrl_apply_delta(root, 1)["version"] == 1
    assert params(w) == expect(vs[1])


def test_failed_load_weights_marks_dirty(chain):
    ck, root, vs = chain
    st = WeightState()
    model = TinyModel(SPECS)
    st.load_checkpoint(ck, 0, model.load_weights)

    def half(weights):
        it = iter(weights)
        model.load_weights([next(it)])
        raise RuntimeError("CUDA out of memory")

    with pytest.raises(StateError, match="half-updated"):
        st.apply_delta(root, 1, half)
    assert st.loaded_version() == -1
    with pytest.raises(StateError, match="asyncrl_load_checkpoint"):
        st.apply_delta(root, 1, model.load_weights)
    # a full reload clears it
    st.load_checkpoint(ck, 0, model.load_weights)
    st.apply_delta(root, 1, model.load_weights)
    assert {n: bytes_of(t) for n, t in model.state_dict().items()} == expect(vs[1])


def test_load_weights_that_stops_early_is_detected(chain):
    ck, root, _ = chain
    st = WeightState()
    model = TinyModel(SPECS)
    st.load_checkpoint(ck, 0, model.load_weights)
    with pytest.raises(StateError, match="consumed 1 of"):
        st.apply_delta(root, 1, lambda ws: model.load_weights([next(iter(ws))]))
    assert st.loaded_version() == -1


def test_unchanged_publish_advances_the_version(chain, tmp_path):
    ck, _, vs = chain
    root = str(tmp_path / "same")
    _, man = encode_delta(raw(vs[0]), raw(vs[0]), 1, root)
    assert man["tensors"] == [] and man["payload_files"] == []
    w = worker()
    w.asyncrl_load_checkpoint(ck, 0)
    w.model_runner.model.loaded.clear()
    assert w.asyncrl_apply_delta(root, 1) == {"version": 1, "patched": 0, "skipped": []}
    assert w.model_runner.model.loaded == [] and params(w) == expect(vs[0])
    assert w.asyncrl_loaded_version() == 1
