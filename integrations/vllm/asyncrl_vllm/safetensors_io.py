"""Minimal safetensors reader/writer (no ``safetensors`` package needed).

A file is an 8-byte little-endian unsigned header length N, N bytes of UTF-8
JSON mapping each tensor name to {"dtype", "shape", "data_offsets": [begin,
end]} (offsets relative to the data section) plus an optional
"__metadata__" string map, then the raw little-endian tensor bytes. The
reader is as strict as asyncrl's Go reader (weights/safetensors/header.go):
offsets contiguous from 0 with no gap or overlap, each tensor's size equal to
product(shape) x dtype size, the data ending exactly at the end of the file,
no duplicate names, known dtypes only. The writer pads the header with spaces
so the data starts 8-byte aligned, as the reference implementation does.

A checkpoint directory is a single ``model.safetensors`` or shards named by
``model.safetensors.index.json`` (the index wins when present), checked as
weights/safetensors/sharded.go OpenDir checks it.

Bytes are handled as numpy uint8 arrays; torch is imported only by the
torch helpers at the bottom.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

SINGLE_FILE_NAME = "model.safetensors"
INDEX_FILE_NAME = "model.safetensors.index.json"

# Bytes per element of every dtype the safetensors spec names.
DTYPE_SIZES: Dict[str, int] = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    # The OCP MX formats' exponent-only scale (torch.float8_e8m0fnu):
    # MXFP8 checkpoints store their per-32-element weight_scale in it.
    "F8_E8M0": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}

# A header larger than this is refused (the reference reader's limit).
MAX_HEADER_BYTES = 100 * 1024 * 1024


class SafetensorsError(ValueError):
    """A malformed safetensors file, index or argument (names the file and field)."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: Tuple[int, ...]
    begin: int  # offset in the data section
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


def num_bytes(dtype: str, shape: Sequence[int]) -> int:
    if dtype not in DTYPE_SIZES:
        raise SafetensorsError(f"unknown dtype {dtype!r}")
    n = DTYPE_SIZES[dtype]
    for d in shape:
        n *= int(d)
    return n


def _no_duplicates(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise SafetensorsError(f"duplicate entry {k!r}")
        out[k] = v
    return out


class SafetensorsFile:
    """One safetensors file opened for reading; only the header is parsed."""

    def __init__(self, path: str):
        self.path = path
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) != 8:
                raise SafetensorsError(f"{path}: {size} bytes, too short for the 8-byte header length")
            (hlen,) = struct.unpack("<Q", raw)
            if hlen > MAX_HEADER_BYTES or 8 + hlen > size:
                raise SafetensorsError(f"{path}: header length {hlen} does not fit in {size} bytes")
            hjs = f.read(hlen)
        self.data_start = 8 + hlen
        self.data_size = size - self.data_start
        try:
            header = json.loads(hjs.decode("utf-8"), object_pairs_hook=_no_duplicates)
        except SafetensorsError as e:
            raise SafetensorsError(f"{path}: {e}") from None
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise SafetensorsError(f"{path}: header JSON: {e}") from None
        if not isinstance(header, dict):
            raise SafetensorsError(f"{path}: header is not a JSON object")
        meta = header.pop("__metadata__", None)
        if meta is not None and not (isinstance(meta, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items())):
            raise SafetensorsError(f"{path}: __metadata__ must map strings to strings")
        self.metadata: Optional[Dict[str, str]] = meta
        infos = []
        for name, e in header.items():
            if not name:
                raise SafetensorsError(f"{path}: empty tensor name")
            if not isinstance(e, dict) or "dtype" not in e or "shape" not in e or "data_offsets" not in e:
                raise SafetensorsError(f"{path}: tensor {name!r}: want dtype, shape and data_offsets")
            dtype, shape, offs = e["dtype"], e["shape"], e["data_offsets"]
            if dtype not in DTYPE_SIZES:
                raise SafetensorsError(f"{path}: tensor {name!r}: unknown dtype {dtype!r}")
            if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
                raise SafetensorsError(f"{path}: tensor {name!r}: bad shape {shape!r}")
            if not (isinstance(offs, list) and len(offs) == 2 and all(isinstance(o, int) for o in offs)):
                raise SafetensorsError(f"{path}: tensor {name!r}: data_offsets must be [begin, end], got {offs!r}")
            b, en = offs
            if not 0 <= b <= en:
                raise SafetensorsError(f"{path}: tensor {name!r}: data_offsets {offs} out of order")
            if num_bytes(dtype, shape) != en - b:
                raise SafetensorsError(f"{path}: tensor {name!r}: shape {shape} x {dtype} needs {num_bytes(dtype, shape)} bytes but data_offsets span {en - b}")
            infos.append(TensorInfo(name, dtype, tuple(shape), b, en))
        pos = 0
        for t in sorted(infos, key=lambda t: (t.begin, t.end)):
            if t.begin != pos:
                what = "overlap the previous tensor" if t.begin < pos else "leave a gap after the previous tensor"
                raise SafetensorsError(f"{path}: tensor {t.name!r}: data_offsets [{t.begin}, {t.end}] {what} (which ends at {pos})")
            pos = t.end
        if pos != self.data_size:
            raise SafetensorsError(f"{path}: tensors cover {pos} data bytes but the file holds {self.data_size}")
        self.tensors: Dict[str, TensorInfo] = {t.name: t for t in infos}

    def names(self) -> List[str]:
        return sorted(self.tensors)

    def info(self, name: str) -> TensorInfo:
        try:
            return self.tensors[name]
        except KeyError:
            raise KeyError(f"{self.path}: no tensor {name!r}") from None

    def read(self, name: str) -> np.ndarray:
        """The tensor's raw bytes as a fresh, writable uint8 array."""
        t = self.info(name)
        out = np.empty(t.nbytes, dtype=np.uint8)
        with open(self.path, "rb") as f:
            f.seek(self.data_start + t.begin)
            n = f.readinto(memoryview(out))
        if n != t.nbytes:
            raise SafetensorsError(f"{self.path}: tensor {name!r}: read {n} of {t.nbytes} bytes (file truncated?)")
        return out


@dataclass
class Checkpoint:
    """A checkpoint directory: tensor name -> the file holding it."""

    dir: str
    files: Dict[str, SafetensorsFile] = field(default_factory=dict)  # by shard base name
    where: Dict[str, str] = field(default_factory=dict)

    def names(self) -> List[str]:
        return sorted(self.where)

    def info(self, name: str) -> TensorInfo:
        return self.files[self.where[name]].info(name)

    def read(self, name: str) -> np.ndarray:
        if name not in self.where:
            raise KeyError(f"{self.dir}: no tensor {name!r}")
        return self.files[self.where[name]].read(name)


def open_checkpoint(dir: str) -> Checkpoint:
    """Opens model.safetensors or the shards of model.safetensors.index.json."""
    ck = Checkpoint(dir)
    idx_path = os.path.join(dir, INDEX_FILE_NAME)
    if not os.path.exists(idx_path):
        path = os.path.join(dir, SINGLE_FILE_NAME)
        if not os.path.exists(path):
            raise SafetensorsError(f"{dir}: neither {SINGLE_FILE_NAME} nor {INDEX_FILE_NAME}")
        f = SafetensorsFile(path)
        ck.files[SINGLE_FILE_NAME] = f
        ck.where = {n: SINGLE_FILE_NAME for n in f.tensors}
        return ck
    try:
        with open(idx_path, "rb") as fh:
            idx = json.loads(fh.read().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{idx_path}: {e}") from None
    wm = idx.get("weight_map") if isinstance(idx, dict) else None
    if not isinstance(wm, dict) or not wm:
        raise SafetensorsError(f"{idx_path}: empty or missing weight_map")
    for shard in sorted(set(wm.values())):
        if not isinstance(shard, str) or shard != os.path.basename(shard) or shard.startswith("."):
            raise SafetensorsError(f"{idx_path}: shard {shard!r} is not a plain file name")
        ck.files[shard] = SafetensorsFile(os.path.join(dir, shard))
    total = 0
    for shard, f in ck.files.items():
        total += f.data_size
        for n in f.tensors:
            if wm.get(n) != shard:
                raise SafetensorsError(f"{idx_path}: tensor {n!r} found in {shard} but the index says {wm.get(n)!r}")
            ck.where[n] = shard
    for n, shard in wm.items():
        if n not in ck.where:
            raise SafetensorsError(f"{idx_path}: tensor {n!r} is not in shard {shard}")
    ts = (idx.get("metadata") or {}).get("total_size", 0)
    if ts and ts != total:
        raise SafetensorsError(f"{idx_path}: total_size {ts} but the shards hold {total} bytes")
    return ck


# A tensor to write: (name, safetensors dtype, shape, raw little-endian bytes).
RawTensor = Tuple[str, str, Sequence[int], bytes]


def encode(tensors: Iterable[RawTensor], metadata: Optional[Dict[str, str]] = None) -> bytes:
    """The bytes of a safetensors file holding tensors in the order given."""
    header: Dict[str, object] = {}
    if metadata is not None:
        header["__metadata__"] = dict(metadata)
    blobs = []
    pos = 0
    for name, dtype, shape, data in tensors:
        data = bytes(memoryview(data).cast("B")) if not isinstance(data, bytes) else data
        if name in header:
            raise SafetensorsError(f"duplicate tensor name {name!r}")
        if num_bytes(dtype, shape) != len(data):
            raise SafetensorsError(f"tensor {name!r}: {len(data)} bytes for {dtype}{list(shape)} (want {num_bytes(dtype, shape)})")
        header[name] = {"dtype": dtype, "shape": [int(d) for d in shape], "data_offsets": [pos, pos + len(data)]}
        blobs.append(data)
        pos += len(data)
    hjs = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjs += b" " * ((-(8 + len(hjs))) % 8)
    return struct.pack("<Q", len(hjs)) + hjs + b"".join(blobs)


def write_file(path: str, tensors: Iterable[RawTensor], metadata: Optional[Dict[str, str]] = None) -> None:
    data = encode(tensors, metadata)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def write_checkpoint(dir: str, tensors: Sequence[RawTensor], max_shard_bytes: int = 0) -> List[str]:
    """Writes model.safetensors, or model-0000i-of-0000N.safetensors shards of
    at most max_shard_bytes of data (a larger tensor gets a shard of its own)
    plus model.safetensors.index.json, as asyncrl's WriteSharded does."""
    os.makedirs(dir, exist_ok=True)
    shards: List[List[RawTensor]] = [[]]
    size = 0
    for t in tensors:
        n = len(t[3])
        if max_shard_bytes > 0 and shards[-1] and size + n > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(t)
        size += n
    if len(shards) == 1:
        write_file(os.path.join(dir, SINGLE_FILE_NAME), shards[0])
        return [SINGLE_FILE_NAME]
    names, wm, total = [], {}, 0
    for i, sh in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        write_file(os.path.join(dir, name), sh)
        for t in sh:
            wm[t[0]] = name
            total += len(t[3])
        names.append(name)
    with open(os.path.join(dir, INDEX_FILE_NAME), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": wm}, f, indent=2)
    return names + [INDEX_FILE_NAME]


# --- torch helpers -------------------------------------------------------

# safetensors dtype -> torch dtype attribute name (FP8 needs torch >= 2.1).
_TORCH_NAMES = {
    "BOOL": "bool",
    "U8": "uint8",
    "I8": "int8",
    "I16": "int16",
    "I32": "int32",
    "I64": "int64",
    "F16": "float16",
    "BF16": "bfloat16",
    "F32": "float32",
    "F64": "float64",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
    "F8_E8M0": "float8_e8m0fnu",
    "U16": "uint16",
    "U32": "uint32",
    "U64": "uint64",
}


def torch_dtype(dtype: str):
    import torch

    name = _TORCH_NAMES.get(dtype)
    td = getattr(torch, name, None) if name else None
    if td is None:
        raise SafetensorsError(f"dtype {dtype} has no torch dtype in torch {torch.__version__} (FP8 needs torch >= 2.1)")
    return td


def safetensors_dtype(torch_dt) -> str:
    s = str(torch_dt).replace("torch.", "")
    for k, v in _TORCH_NAMES.items():
        if v == s:
            return k
    raise SafetensorsError(f"torch dtype {torch_dt} has no safetensors dtype")


def to_torch(buf: np.ndarray, dtype: str, shape: Sequence[int]):
    """A CPU torch tensor sharing buf's memory (buf: uint8, C order)."""
    import torch

    t = torch.from_numpy(buf)  # uint8, shares memory
    if dtype != "U8":
        t = t.view(torch_dtype(dtype))
    return t.reshape(tuple(int(d) for d in shape))


def tensor_bytes(t) -> bytes:
    """The raw little-endian bytes of a torch tensor (C order)."""
    import torch

    t = t.detach().contiguous().cpu().reshape(-1)
    return t.view(torch.uint8).numpy().tobytes()
