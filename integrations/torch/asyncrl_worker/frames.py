"""Worker-bridge frames, protocol v1 (docs/protocol.md): u32 little-endian
length N (<= 1 GiB), then N bytes holding one CBOR map with text keys."""

from __future__ import annotations

import struct
from typing import BinaryIO

import cbor2
import numpy as np
import torch

PROTOCOL_VERSION = 1
MAX_FRAME = 1 << 30

# frame dtype -> little-endian numpy dtype
DTYPES = {"int32": np.dtype("<i4"), "int64": np.dtype("<i8"), "uint8": np.dtype("u1"), "float32": np.dtype("<f4")}
_NP_TO_NAME = {np.dtype(v).newbyteorder("="): k for k, v in DTYPES.items()}


class FrameError(Exception):
    """A request the child refuses. code: bad_frame | bad_field |
    unsupported_version | internal; field names the offending field."""

    def __init__(self, code: str, field: str, message: str):
        super().__init__(f"{code}: {field}: {message}" if field else f"{code}: {message}")
        self.code, self.field, self.message = code, field, message


class EOF(Exception):
    """The peer closed the stream between frames."""


def _read_exact(r: BinaryIO, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = r.read(n - len(buf))
        if not chunk:
            break
        buf += chunk
    return bytes(buf)


def read_frame(r: BinaryIO) -> dict:
    """Read one frame. Raises EOF at a clean end of stream, FrameError(bad_frame)
    for a truncated, oversized or non-CBOR-map frame (the stream stays in sync
    whenever the length prefix itself was read)."""
    head = _read_exact(r, 4)
    if not head:
        raise EOF()
    if len(head) < 4:
        raise EOF()  # the peer died mid-prefix; nothing to answer
    (n,) = struct.unpack("<I", head)
    if n > MAX_FRAME:
        left = n
        while left > 0:  # skip the body to stay in sync with the stream
            got = r.read(min(left, 1 << 20))
            if not got:
                raise EOF()
            left -= len(got)
        raise FrameError("bad_frame", "", f"frame of {n} bytes exceeds the 1 GiB limit")
    body = _read_exact(r, n)
    if len(body) < n:
        raise EOF()
    try:
        obj = cbor2.loads(body)
    except Exception as e:  # cbor2 raises several types on bad input
        raise FrameError("bad_frame", "", f"malformed CBOR: {e}") from None
    if not isinstance(obj, dict) or not all(isinstance(k, str) for k in obj):
        raise FrameError("bad_frame", "", "frame is not a CBOR map with text keys")
    return obj


def encode_frame(obj: dict) -> bytes:
    body = cbor2.dumps(obj)
    if len(body) > MAX_FRAME:
        raise FrameError("internal", "", f"reply of {len(body)} bytes exceeds the 1 GiB limit")
    return struct.pack("<I", len(body)) + body


def write_frame(w: BinaryIO, obj: dict) -> None:
    w.write(encode_frame(obj))
    w.flush()


def tensor_obj(a) -> dict:
    """numpy array or torch tensor -> frame tensor object."""
    if isinstance(a, torch.Tensor):
        a = a.detach().cpu().numpy()
    a = np.ascontiguousarray(a)
    name = _NP_TO_NAME.get(a.dtype.newbyteorder("="))
    if name is None:
        raise ValueError(f"dtype {a.dtype} has no frame dtype (int32, int64, uint8, float32)")
    return {"dtype": name, "shape": list(a.shape), "data": a.astype(DTYPES[name]).tobytes()}


def parse_tensor(obj, field: str, want_dtype: str | None = None, ndim: int | None = None) -> np.ndarray:
    """Frame tensor object -> numpy array (native byte order), validating
    dtype, shape and byte length; errors are bad_field naming field."""
    if not isinstance(obj, dict):
        raise FrameError("bad_field", field, "must be a tensor object {dtype, shape, data}")
    extra = set(obj) - {"dtype", "shape", "data"}
    if extra:
        raise FrameError("bad_field", f"{field}.{sorted(extra)[0]}", "unknown key in a tensor object")
    dt, shape, data = obj.get("dtype"), obj.get("shape"), obj.get("data")
    if dt not in DTYPES:
        raise FrameError("bad_field", field, f"dtype {dt!r} is not one of int32, int64, uint8, float32")
    if want_dtype is not None and dt != want_dtype:
        raise FrameError("bad_field", field, f"dtype {dt} but must be {want_dtype}")
    if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
        raise FrameError("bad_field", field, f"shape {shape!r} must be a list of non-negative integers")
    if ndim is not None and len(shape) != ndim:
        raise FrameError("bad_field", field, f"shape {shape} must have {ndim} dimension(s)")
    if not isinstance(data, (bytes, bytearray)):
        raise FrameError("bad_field", field, "data must be a byte string")
    n = 1
    for s in shape:
        n *= s
    need = n * DTYPES[dt].itemsize
    if len(data) != need:
        raise FrameError("bad_field", field, f"data is {len(data)} bytes but shape {shape} of {dt} needs {need}")
    return np.frombuffer(bytes(data), dtype=DTYPES[dt]).reshape(shape).astype(DTYPES[dt].newbyteorder("="))


def error_frame(req_id: int, code: str, field: str, message: str) -> dict:
    return {"v": PROTOCOL_VERSION, "type": "Error", "id": req_id, "code": code, "field": field, "message": message}
