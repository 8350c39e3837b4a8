"""A small safetensors reader/writer (no dependency on the safetensors package).

Format: u64 little-endian header length N, N bytes of JSON header
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
then the raw little-endian, C-order tensor data; offsets are relative to the
end of the header and the tensors tile the data without gaps or overlaps (the
rule asyncrl's Go reader, weights/safetensors, enforces).

Supported dtypes: F32, BF16, F16, I64, I32, U8. BF16 is written by rounding
float32 to nearest-even, as Go's safetensors.EncodeBF16 / policy.roundBF16 do
(and torch's .to(torch.bfloat16)).
"""

from __future__ import annotations

import json
import os
import struct
import tempfile

import numpy as np
import torch

MAX_HEADER = 100 << 20  # as Go's safetensors.MaxHeaderSize

# safetensors dtype -> (numpy dtype of the raw bytes, torch dtype, item size)
_DTYPES = {
    "F32": (np.dtype("<f4"), torch.float32, 4),
    "BF16": (np.dtype("<u2"), torch.bfloat16, 2),
    "F16": (np.dtype("<f2"), torch.float16, 2),
    "I64": (np.dtype("<i8"), torch.int64, 8),
    "I32": (np.dtype("<i4"), torch.int32, 4),
    "U8": (np.dtype("u1"), torch.uint8, 1),
}
_TORCH_TO_ST = {v[1]: k for k, v in _DTYPES.items()}


class SafetensorsError(ValueError):
    """A malformed or unsupported safetensors file."""


def _bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """Round float32 to bfloat16 (nearest, ties to even; NaN stays a quiet NaN)."""
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).copy()
    nan_inf = (b & 0x7F800000) == 0x7F800000
    nan = nan_inf & ((b & 0x007FFFFF) != 0)
    rounded = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
    out = np.where(nan_inf, np.where(nan, b | 0x00400000, b) & 0xFFFF0000, rounded)
    return (out >> 16).astype(np.uint16)


def round_bf16(t: torch.Tensor) -> torch.Tensor:
    """float32 tensor rounded to the nearest bfloat16 value, kept as float32."""
    bits = f32_to_bf16_bits(t.detach().cpu().float().numpy())
    return torch.from_numpy(_bf16_bits_to_f32(bits).reshape(tuple(t.shape)).copy())


def _parse(buf: bytes, path: str):
    if len(buf) < 8:
        raise SafetensorsError(f"{path}: shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", buf[:8])
    if n > MAX_HEADER or 8 + n > len(buf):
        raise SafetensorsError(f"{path}: header length {n} out of range (file is {len(buf)} bytes)")
    try:
        header = json.loads(buf[8 : 8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{path}: header JSON: {e}") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: header is not a JSON object")
    data = memoryview(buf)[8 + n :]
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        raise SafetensorsError(f"{path}: __metadata__ must map strings to strings")
    spans = []
    for name, e in header.items():
        if not isinstance(e, dict) or set(e) - {"dtype", "shape", "data_offsets"}:
            raise SafetensorsError(f"{path}: tensor {name!r}: malformed entry")
        dt = e.get("dtype")
        if dt not in _DTYPES:
            raise SafetensorsError(f"{path}: tensor {name!r}: unsupported dtype {dt!r}")
        shape, offs = e.get("shape"), e.get("data_offsets")
        if not isinstance(shape, list) or not all(isinstance(s, int) and s >= 0 for s in shape):
            raise SafetensorsError(f"{path}: tensor {name!r}: bad shape {shape!r}")
        if not (isinstance(offs, list) and len(offs) == 2 and all(isinstance(o, int) for o in offs)):
            raise SafetensorsError(f"{path}: tensor {name!r}: data_offsets must be [begin, end]")
        b, en = offs
        need = int(np.prod(shape, dtype=np.int64)) * _DTYPES[dt][2]
        if b < 0 or en < b or en - b != need or en > len(data):
            raise SafetensorsError(f"{path}: tensor {name!r}: shape {shape} x {dt} needs {need} bytes, data_offsets {offs}")
        spans.append((b, en, name))
    pos = 0
    for b, en, name in sorted(spans):
        if b != pos:
            raise SafetensorsError(f"{path}: tensor {name!r}: data_offsets [{b}, {en}] leave a gap or overlap at {pos}")
        pos = en
    if pos != len(data):
        raise SafetensorsError(f"{path}: {len(data) - pos} trailing bytes after the last tensor")
    return header, meta, data


def load_file(path: str, as_float32: bool = False) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Read every tensor of one file. as_float32 widens F32/BF16/F16 to float32."""
    with open(path, "rb") as f:
        buf = f.read()
    header, meta, data = _parse(buf, path)
    out = {}
    for name, e in header.items():
        npdt, tdt, _ = _DTYPES[e["dtype"]]
        b, en = e["data_offsets"]
        arr = np.frombuffer(data[b:en], dtype=npdt).reshape(e["shape"])
        if e["dtype"] == "BF16":
            t = torch.from_numpy(_bf16_bits_to_f32(arr).copy())
            if not as_float32:
                t = t.to(torch.bfloat16)
        else:
            t = torch.from_numpy(arr.astype(npdt.newbyteorder("=")).copy())
            if as_float32 and e["dtype"] == "F16":
                t = t.float()
        out[name] = t
    return out, dict(meta)


def load_dir(d: str, as_float32: bool = False) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Read model.safetensors, or the shards model.safetensors.index.json names."""
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            index = json.load(f)
        files = sorted(set(index.get("weight_map", {}).values()))
        if not files:
            raise SafetensorsError(f"{idx}: empty weight_map")
        tensors, meta = {}, {}
        for fn in files:
            t, m = load_file(os.path.join(d, fn), as_float32)
            tensors.update(t)
            meta.update(m)
        return tensors, meta
    return load_file(os.path.join(d, "model.safetensors"), as_float32)


def encode(tensors: dict[str, torch.Tensor], dtypes: dict[str, str] | None = None,
           metadata: dict[str, str] | None = None) -> bytes:
    """Serialise tensors (in the dict's order). dtypes optionally maps a name to
    the safetensors dtype to store it as (float tensors only: F32, BF16, F16)."""
    header: dict = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    chunks, pos = [], 0
    for name, t in tensors.items():
        t = t.detach().cpu().contiguous()
        st = (dtypes or {}).get(name) or _TORCH_TO_ST.get(t.dtype)
        if st is None:
            raise SafetensorsError(f"tensor {name!r}: unsupported dtype {t.dtype}")
        if st == "BF16":
            raw = f32_to_bf16_bits(t.float().numpy()).tobytes() if t.dtype != torch.bfloat16 else \
                t.view(torch.int16).numpy().astype("<i2").tobytes()
        elif st in ("F32", "F16"):
            raw = t.float().numpy().astype(_DTYPES[st][0]).tobytes()
        else:
            raw = t.numpy().astype(_DTYPES[st][0]).tobytes()
        header[name] = {"dtype": st, "shape": list(t.shape), "data_offsets": [pos, pos + len(raw)]}
        chunks.append(raw)
        pos += len(raw)
    hjs = json.dumps(header, separators=(",", ":")).encode()
    hjs += b" " * (-len(hjs) % 8)  # pad to 8 bytes like the reference writer
    return struct.pack("<Q", len(hjs)) + hjs + b"".join(chunks)


def atomic_write(path: str, data: bytes, mode: int = 0o644) -> None:
    """Write via temp file + rename so a reader never sees a partial file."""
    d = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(dir=d, prefix="." + os.path.basename(path) + ".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def save_file(path: str, tensors: dict[str, torch.Tensor], dtypes: dict[str, str] | None = None,
              metadata: dict[str, str] | None = None) -> None:
    atomic_write(path, encode(tensors, dtypes, metadata))
