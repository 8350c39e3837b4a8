import json
import os
import struct

import numpy as np
import pytest
import torch

from asyncrl_vllm import safetensors_io as sio
from helpers import raw


def sample():
    g = torch.Generator().manual_seed(1)
    return {
        "a.bf16": torch.randn(3, 5, generator=g).to(torch.bfloat16),
        "b.f32": torch.randn(7, generator=g),
        "c.f16": torch.randn(2, 2, generator=g).to(torch.float16),
        "d.i64": torch.arange(5, dtype=torch.int64) - 2,
        "e.i32": torch.arange(3, dtype=torch.int32),
        "f.u8": torch.arange(9, dtype=torch.uint8),
        "g.scalar": torch.tensor(3.5),
    }


def test_roundtrip_every_dtype_and_alignment(tmp_path):
    ts = raw(sample())
    items = [(n, d, s, b) for n, (d, s, b) in ts.items()] + [("h.fp8", "F8_E4M3", [4], bytes([0x00, 0x38, 0x7E, 0xFE])), ("i.fp8", "F8_E5M2", [2], b"\x3c\xbc")]
    p = str(tmp_path / "x.safetensors")
    sio.write_file(p, items, {"format": "pt"})
    f = sio.SafetensorsFile(p)
    assert f.data_start % 8 == 0
    assert f.metadata == {"format": "pt"}
    assert f.names() == sorted(n for n, *_ in items)
    for n, d, s, b in items:
        info = f.info(n)
        assert (info.dtype, list(info.shape)) == (d, list(s))
        assert f.read(n).tobytes() == b
    # torch views of the bytes give back the tensors
    for n, t in sample().items():
        info = f.info(n)
        got = sio.to_torch(f.read(n), info.dtype, info.shape)
        assert got.dtype == t.dtype and torch.equal(got, t)


def test_sharded_checkpoint(tmp_path):
    ts = raw(sample())
    names = sio.write_checkpoint(str(tmp_path), [(n, d, s, b) for n, (d, s, b) in ts.items()], max_shard_bytes=40)
    assert sio.INDEX_FILE_NAME in names and len(names) > 2
    ck = sio.open_checkpoint(str(tmp_path))
    assert ck.names() == sorted(ts)
    for n, (d, s, b) in ts.items():
        assert ck.read(n).tobytes() == b


def _write_raw(path, header, data):
    hjs = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjs)) + hjs + data)


@pytest.mark.parametrize("header,data,msg", [
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 4, "needs 8 bytes"),
    ({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}, "b": {"dtype": "U8", "shape": [2], "data_offsets": [3, 5]}}, b"\0" * 5, "gap"),
    ({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}}, b"\0" * 3, "file holds 3"),
    ({"a": {"dtype": "X9", "shape": [2], "data_offsets": [0, 2]}}, b"\0" * 2, "unknown dtype"),
])
def test_malformed_files_refused(tmp_path, header, data, msg):
    p = str(tmp_path / "bad.safetensors")
    _write_raw(p, header, data)
    with pytest.raises(sio.SafetensorsError, match=msg):
        sio.SafetensorsFile(p)


def test_duplicate_name_refused(tmp_path):
    p = str(tmp_path / "dup.safetensors")
    hjs = b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}'
    with open(p, "wb") as f:
        f.write(struct.pack("<Q", len(hjs)) + hjs + b"\0\0")
    with pytest.raises(sio.SafetensorsError, match="duplicate"):
        sio.SafetensorsFile(p)


def test_index_naming_missing_tensor_refused(tmp_path):
    ts = raw(sample())
    sio.write_checkpoint(str(tmp_path), [(n, d, s, b) for n, (d, s, b) in ts.items()], max_shard_bytes=40)
    idx = json.load(open(tmp_path / sio.INDEX_FILE_NAME))
    idx["weight_map"]["ghost"] = next(iter(idx["weight_map"].values()))
    json.dump(idx, open(tmp_path / sio.INDEX_FILE_NAME, "w"))
    with pytest.raises(sio.SafetensorsError, match="ghost"):
        sio.open_checkpoint(str(tmp_path))
