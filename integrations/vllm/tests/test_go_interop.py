"""Acceptance: deltas made by asyncrl's Go binary (`asyncrl weights diff`)
applied by this package onto a torch model, bit for bit.

The binary comes from conftest.py's asyncrl_bin fixture ($ASYNCRL_BIN, or
built from the repository root); without `go` these tests are skipped.
"""

import json
import os
import shutil
import subprocess

import numpy as np
import pytest
import torch

from asyncrl_vllm import WorkerExtension
from asyncrl_vllm import delta as d
from asyncrl_vllm import safetensors_io as sio
from helpers import FakeModelRunner, TinyModel, bytes_of, encode_delta, perturb, raw, write_ckpt


def go_diff(bin, base, new, root, version, *extra):
    p = subprocess.run([bin, "weights", "diff", "--base", base, "--new", new, "--out", root, "--version", str(version), "--json", *extra],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


SPECS = {
    "model.embed_tokens.weight": (torch.bfloat16, (32, 16)),
    "model.layers.0.self_attn.q_proj.weight": (torch.bfloat16, (16, 16)),
    "model.layers.0.mlp.down_proj.weight": (torch.float32, (16, 24)),
    "model.layers.0.mlp.down_proj.bias": (torch.float32, (16,)),  # never changes
    "model.norm.weight": (torch.float16, (16,)),
    "lm_head.weight": (torch.bfloat16, (32, 16)),
}


def versions(n):
    g = torch.Generator().manual_seed(11)
    vs = [{name: torch.randn(shape, generator=g).to(dt) for name, (dt, shape) in SPECS.items()}]
    for k in range(1, n + 1):
        vs.append({name: (t if name.endswith("bias") else perturb(t, 100 * k + i, frac=0.05)) for i, (name, t) in enumerate(vs[-1].items())})
    return vs


@pytest.fixture(scope="module")
def go_chain(asyncrl_bin, tmp_path_factory):
    """Checkpoints v0..v2 (v1 sharded) written by safetensors_io, deltas 1..2 by Go."""
    tmp = tmp_path_factory.mktemp("go")
    vs = versions(2)
    dirs = [write_ckpt(str(tmp / f"v{k}"), vs[k], max_shard_bytes=2048 if k == 1 else 0) for k in range(3)]
    root = str(tmp / "sync")
    summaries = [go_diff(asyncrl_bin, dirs[k - 1], dirs[k], root, k) for k in (1, 2)]
    return dirs, root, vs, summaries


def worker(specs=SPECS):
    w = WorkerExtension()
    w.model_runner = FakeModelRunner(TinyModel(specs))
    return w


def params(w):
    return {n: bytes_of(t) for n, t in w.model_runner.model.state_dict().items()}


def expect(tensors, names=None):
    return {n: bytes_of(t) for n, t in tensors.items() if names is None or n in names}


def test_go_deltas_apply_bit_exact_onto_torch_params(go_chain):
    dirs, root, vs, summaries = go_chain
    assert [s["version"] for s in summaries] == [1, 2]
    # the unchanged bias is omitted from Go's manifest
    for k in (1, 2):
        m = d.read_manifest_dir(os.path.join(root, d.delta_dir_name(k)), k)
        assert "model.layers.0.mlp.down_proj.bias" not in {e.name for e in m.tensors}
        assert {e.dtype for e in m.tensors} >= {"BF16", "F32", "F16"}
    w = worker()
    w.asyncrl_load_checkpoint(dirs[0], 0)
    assert params(w) == expect(vs[0])
    for k in (1, 2):
        w.model_runner.model.loaded.clear()
        r = w.asyncrl_apply_delta(root, k)
        assert r == {"version": k, "patched": len(SPECS) - 1, "skipped": []}
        assert "model.layers.0.mlp.down_proj.bias" not in w.model_runner.model.loaded
        assert params(w) == expect(vs[k])
        assert w.asyncrl_loaded_version() == k


def test_python_encoder_agrees_with_go(go_chain, tmp_path):
    """Same tensors, dtypes, sizes and checksums as Go's manifest (the zstd bytes may differ)."""
    dirs, root, vs, _ = go_chain
    _, mine = encode_delta(raw(vs[0]), raw(vs[1]), 1, str(tmp_path))
    go = json.load(open(os.path.join(root, d.delta_dir_name(1), "manifest.json")))
    key = lambda m: sorted((e["name"], e["dtype"], e["shape"], e["uncompressed_num_bytes"], e["checksum"], e["checksum_algorithm"]) for e in m["tensors"])
    assert key(mine) == key(go)
    assert (go["version"], go["base_version"]) == (1, 0)


def test_skip_absent_with_go_delta(go_chain, tmp_path):
    """A served checkpoint without lm_head (tied): the delta's lm_head is skipped, the rest applies."""
    dirs, root, vs, _ = go_chain
    specs = {n: s for n, s in SPECS.items() if n != "lm_head.weight"}
    ck = write_ckpt(str(tmp_path / "tied"), {n: t for n, t in vs[0].items() if n in specs})
    w = worker(specs)
    w.asyncrl_load_checkpoint(ck, 0)
    r = w.asyncrl_apply_delta(root, 1)
    assert r["skipped"] == ["lm_head.weight"] and r["patched"] == len(specs) - 1
    assert params(w) == expect(vs[1], specs)


def test_fp8_and_int_tensors_raw(asyncrl_bin, tmp_path):
    """FP8 (no torch dtype in torch < 2.1) and integer tensors: Go's delta applied to raw byte buffers."""
    rng = np.random.default_rng(5)
    old = {
        "w.fp8": ("F8_E4M3", [8, 8], rng.integers(0, 256, 64, dtype=np.uint8).tobytes()),
        "w.e5m2": ("F8_E5M2", [16], rng.integers(0, 256, 16, dtype=np.uint8).tobytes()),
        "ids": ("I64", [4], np.arange(4, dtype="<i8").tobytes()),
        "mask": ("I32", [3], np.arange(3, dtype="<i4").tobytes()),
    }
    new = dict(old)
    b = bytearray(old["w.fp8"][2]); b[5] ^= 0x11; b[60] ^= 0x80
    new["w.fp8"] = ("F8_E4M3", [8, 8], bytes(b))
    new["ids"] = ("I64", [4], np.array([0, 1, 7, 3], dtype="<i8").tobytes())
    for k, rw in (("old", old), ("new", new)):
        sio.write_checkpoint(str(tmp_path / k), [(n, *v) for n, v in rw.items()])
    root = str(tmp_path / "sync")
    go_diff(asyncrl_bin, str(tmp_path / "old"), str(tmp_path / "new"), root, 1)
    vdir = os.path.join(root, d.delta_dir_name(1))
    m = d.read_manifest_dir(vdir, 1)
    assert sorted((e.name, e.dtype) for e in m.tensors) == [("ids", "I64"), ("w.fp8", "F8_E4M3")]
    cur = {n: d.CurrentTensor(dt, tuple(s), np.frombuffer(bb, np.uint8).copy()) for n, (dt, s, bb) in old.items()}
    list(d.prepare(m, vdir, cur).apply(cur))
    assert {n: t.data.tobytes() for n, t in cur.items()} == {n: v[2] for n, v in new.items()}


def _copy_root(root, tmp_path):
    dst = str(tmp_path / "sync-copy")
    shutil.copytree(root, dst)
    return dst


def test_corrupt_go_frame_refused_params_unchanged(go_chain, tmp_path):
    dirs, root, vs, _ = go_chain
    root = _copy_root(root, tmp_path)
    vdir = os.path.join(root, d.delta_dir_name(1))
    m = d.read_manifest_dir(vdir, 1)
    e = next(e for e in m.tensors if e.name == "model.layers.0.mlp.down_proj.weight")
    path = os.path.join(vdir, e.payload_file)
    f = sio.SafetensorsFile(path)
    info = f.info(e.payload_key)
    buf = bytearray(open(path, "rb").read())
    buf[f.data_start + info.begin + info.nbytes // 2] ^= 0x5A  # inside the zstd frame
    open(path, "wb").write(bytes(buf))
    w = worker()
    w.asyncrl_load_checkpoint(dirs[0], 0)
    w.model_runner.model.loaded.clear()
    with pytest.raises((d.CorruptError, d.ChecksumError), match="down_proj.weight"):
        w.asyncrl_apply_delta(root, 1)
    assert w.model_runner.model.loaded == []
    assert params(w) == expect(vs[0]) and w.asyncrl_loaded_version() == 0


def test_go_checksum_flip_refused_params_unchanged(go_chain, tmp_path):
    dirs, root, vs, _ = go_chain
    root = _copy_root(root, tmp_path)
    p = os.path.join(root, d.delta_dir_name(2), "manifest.json")
    man = json.load(open(p))
    c = man["tensors"][0]["checksum"]
    man["tensors"][0]["checksum"] = c[:-1] + ("0" if c[-1] != "0" else "1")
    json.dump(man, open(p, "w"))
    w = worker()
    w.asyncrl_load_checkpoint(dirs[0], 0)
    w.asyncrl_apply_delta(root, 1)
    with pytest.raises(d.ChecksumError, match=man["tensors"][0]["name"]):
        w.asyncrl_apply_delta(root, 2)
    assert params(w) == expect(vs[1]) and w.asyncrl_loaded_version() == 1
    with pytest.raises(d.ChainError):
        w.asyncrl_apply_delta(root, 3)  # wrong version number
    assert params(w) == expect(vs[1])
