import json
import os

import numpy as np
import pytest
import torch

from asyncrl_vllm import delta as d
from asyncrl_vllm import safetensors_io as sio
from helpers import encode_delta, perturb, raw

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def tensors():
    g = torch.Generator().manual_seed(7)
    return {
        "w.bf16": torch.randn(8, 4, generator=g).to(torch.bfloat16),
        "w.f32": torch.randn(16, generator=g),
        "same.f32": torch.randn(3, generator=g),
    }


def current_of(rawd):
    return {n: d.CurrentTensor(dt, tuple(s), np.frombuffer(b, np.uint8).copy()) for n, (dt, s, b) in rawd.items()}


def snapshot(cur):
    return {n: t.data.tobytes() for n, t in cur.items()}


@pytest.fixture
def pair(tmp_path):
    old = tensors()
    new = {n: (t if n == "same.f32" else perturb(t, i)) for i, (n, t) in enumerate(old.items())}
    fp8_old = ("F8_E4M3", [6], bytes([0, 0x38, 0x40, 0x7E, 0xB8, 0x01]))
    fp8_new = ("F8_E4M3", [6], bytes([0, 0x39, 0x40, 0x7E, 0xB0, 0x01]))
    ro, rn = raw(old), raw(new)
    ro["q.fp8"], rn["q.fp8"] = fp8_old, fp8_new
    vdir, man = encode_delta(ro, rn, 1, str(tmp_path))
    return ro, rn, vdir, man


def test_apply_gives_new_bytes_and_skips_unchanged(pair):
    ro, rn, vdir, _ = pair
    m = d.read_manifest_dir(vdir, 1)
    assert sorted(e.name for e in m.tensors) == ["q.fp8", "w.bf16", "w.f32"]  # same.f32 unchanged: omitted
    assert {e.name: e.dtype for e in m.tensors}["q.fp8"] == "F8_E4M3"
    cur = current_of(ro)
    prep = d.prepare(m, vdir, cur)
    assert snapshot(cur) == {n: b for n, (_, _, b) in ro.items()}  # prepare touches nothing
    assert sorted(prep.apply(cur)) == ["q.fp8", "w.bf16", "w.f32"]
    assert snapshot(cur) == {n: b for n, (_, _, b) in rn.items()}


def test_skip_absent(pair):
    ro, rn, vdir, _ = pair
    del ro["w.f32"]
    cur = current_of(ro)
    prep = d.prepare(d.read_manifest_dir(vdir, 1), vdir, cur)
    assert prep.skipped == ["w.f32"]
    list(prep.apply(cur))
    assert cur["w.bf16"].data.tobytes() == rn["w.bf16"][2]


def _rewrite_manifest(vdir, fn):
    p = os.path.join(vdir, "manifest.json")
    m = json.load(open(p))
    fn(m)
    json.dump(m, open(p, "w"))


def test_checksum_mismatch_names_every_bad_tensor_and_changes_nothing(pair):
    ro, _, vdir, _ = pair

    def bad(m):
        for e in m["tensors"]:
            if e["name"] in ("w.bf16", "q.fp8"):
                e["checksum"] = ("0" if e["checksum"][0] != "0" else "1") + e["checksum"][1:]
    _rewrite_manifest(vdir, bad)
    cur = current_of(ro)
    with pytest.raises(d.ChecksumError) as ei:
        d.prepare(d.read_manifest_dir(vdir, 1), vdir, cur)
    assert "'w.bf16'" in str(ei.value) and "'q.fp8'" in str(ei.value) and "'w.f32'" not in str(ei.value)
    assert snapshot(cur) == {n: b for n, (_, _, b) in ro.items()}


def test_corrupt_frame_refused(pair):
    ro, _, vdir, man = pair
    pf = os.path.join(vdir, man["payload_files"][0])
    f = sio.SafetensorsFile(pf)
    info = f.info("w.f32")
    buf = bytearray(open(pf, "rb").read())
    buf[f.data_start + info.begin + info.nbytes // 2] ^= 0xFF
    open(pf, "wb").write(bytes(buf))
    cur = current_of(ro)
    with pytest.raises((d.CorruptError, d.ChecksumError), match="w.f32"):
        d.prepare(d.read_manifest_dir(vdir, 1), vdir, cur)
    assert snapshot(cur) == {n: b for n, (_, _, b) in ro.items()}


def test_truncated_payload_and_wrong_size_refused(pair):
    ro, _, vdir, man = pair
    pf = os.path.join(vdir, man["payload_files"][0])
    data = open(pf, "rb").read()
    open(pf, "wb").write(data[:-5])
    with pytest.raises(d.CorruptError, match="payload"):
        d.prepare(d.read_manifest_dir(vdir, 1), vdir, current_of(ro))


def test_mismatched_shape_refused(pair):
    ro, _, vdir, _ = pair
    cur = current_of(ro)
    cur["w.f32"] = d.CurrentTensor("F32", (4, 4), cur["w.f32"].data)
    with pytest.raises(d.MismatchError, match="w.f32"):
        d.prepare(d.read_manifest_dir(vdir, 1), vdir, cur)


def test_sha256_and_legacy_field(tmp_path):
    old = raw(tensors())
    new = raw({n: perturb(t, 3) for n, t in tensors().items()})
    vdir, _ = encode_delta(old, new, 1, str(tmp_path), algo="sha256")
    # the older SkyRL spelling: a "sha256" field and no checksum/checksum_algorithm
    def legacy(m):
        for e in m["tensors"]:
            e["sha256"] = e.pop("checksum")
            del e["checksum_algorithm"]
    _rewrite_manifest(vdir, legacy)
    m = d.read_manifest_dir(vdir, 1)
    assert {e.checksum_algorithm for e in m.tensors} == {"sha256"}
    cur = current_of(old)
    list(d.prepare(m, vdir, cur).apply(cur))
    assert snapshot(cur) == {n: b for n, (_, _, b) in new.items()}


def test_go_golden_manifest_parses():
    # weights/delta/testdata/manifest.golden.json is the Go codec's fixed manifest layout.
    p = os.path.join(REPO, "weights", "delta", "testdata", "manifest.golden.json")
    if not os.path.exists(p):
        pytest.skip(f"{p} not found (run inside the asyncrl repository)")
    m = d.parse_manifest(open(p, "rb").read())
    assert (m.version, m.base_version) == (3, 2)
    e = m.tensors[0]
    assert (e.dtype, e.shape, e.checksum_algorithm) == ("BF16", (4, 2), "xxh3-128")


@pytest.mark.parametrize("edit,msg", [
    (lambda m: m.update(total_compressed_num_bytes=m["total_compressed_num_bytes"] + 1), "totals"),
    (lambda m: m.update(base_version=1), "base_version"),
    (lambda m: m["tensors"][0].update(payload_file="other.safetensors"), "not in payload_files"),
    (lambda m: m["tensors"][0].update(uncompressed_num_bytes=3), "uncompressed_num_bytes"),
    (lambda m: m["tensors"][0].update(dtype="complex32"), "unknown dtype"),
    (lambda m: m["tensors"][0].update(checksum_algorithm="md5"), "checksum_algorithm"),
    (lambda m: m["tensors"][0].update(checksum="abc"), "32 hex digits"),
    (lambda m: m["payload_files"].append("../x"), "plain file name"),
])
def test_bad_manifest_refused(pair, edit, msg):
    _, _, vdir, _ = pair
    _rewrite_manifest(vdir, edit)
    with pytest.raises(d.ManifestError, match=msg):
        d.read_manifest_dir(vdir, 1)


def test_manifest_of_another_version_is_a_chain_error(pair):
    _, _, vdir, _ = pair
    with pytest.raises(d.ChainError, match="says version 1"):
        d.read_manifest_dir(vdir, 2)


def test_dtype_spellings():
    assert d.normalize_dtype("bfloat16") == d.normalize_dtype("torch.bfloat16") == d.normalize_dtype("BF16") == "BF16"
    assert d.normalize_dtype("float8_e4m3fn") == "F8_E4M3"
    assert d.normalize_dtype("F8_E5M2") == "F8_E5M2"
    with pytest.raises(ValueError):
        d.normalize_dtype("qint4")


def test_xxh3_matches_go_canonical_form():
    # weights/delta/checksum.go: xxh3-128 of the empty input is 99aa06d3014798d86001c324468d497f.
    assert d.checksum("xxh3-128", b"") == "99aa06d3014798d86001c324468d497f"
