"""A small safetensors reader/writer (no dependency on the safetensors package).

Format: u64 little-endian header length N, N bytes of JSON header
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
then the raw little-endian, C-order tensor data; offsets are relative to the
end of the header and the tensors tile the data without gaps or overlaps (the
rule asyncrl's Go reader, weights/safetensors, enforces).

Supported dtypes: F32, BF16, F16, I64, I32, U8. BF16 is written by rounding
float32 to nearest-even, as Go's safetensors.EncodeBF16 / policy.roundBF16 do
(and torch's .to(torch.bfloat16)).

Hugging Face's layout (encode(..., hf_order=True), save_sharded): the
safetensors library orders a file's tensors by descending dtype alignment,
then by name, and writes the header as compact JSON with __metadata__ first
and the tensors in data order, padded with spaces to a multiple of 8
(huggingface/safetensors safetensors/src/tensor.rs @000a16f45cff0d4169ca15b67ea002895234d671:
prepare() sorts `right.dtype().cmp(&left.dtype()).then(lname.cmp(rname))`,
the Dtype enum lists BOOL < U8 < ... < F16 < BF16 < I32 < U32 < F32 < F64 <
I64 < U64; Metadata::serialize). A sharded checkpoint is split as
huggingface_hub does (src/huggingface_hub/serialization/_base.py
@122aa5cc086c89643b30efe845398d54505f7866, split_state_dict_into_shards_factory:
tensors in state-dict order, a new shard when the next tensor would take the
current one over max_shard_size, a tensor larger than the limit alone in its
own shard, files model-0000i-of-0000n.safetensors, index {"metadata":
{"total_size": bytes}, "weight_map": {name: file}}), and transformers writes
the index as json.dumps(index, indent=2, sort_keys=True) + "\n".
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
# safetensors' Dtype enum order (increasing alignment): files sort by it, descending
_DTYPE_RANK = {n: i for i, n in enumerate(("BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16",
                                            "I32", "U32", "F32", "F64", "I64", "U64"))}
INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
HF_MAX_SHARD_SIZE = 5_000_000_000  # huggingface_hub MAX_SHARD_SIZE (5GB)


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


def read_header(path: str) -> tuple[dict, dict[str, str]]:
    """The header of one file ({name: {dtype, shape, data_offsets}},
    metadata) without reading the tensor data."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise SafetensorsError(f"{path}: shorter than the 8-byte header length")
        (n,) = struct.unpack("<Q", head)
        size = os.fstat(f.fileno()).st_size
        if n > MAX_HEADER or 8 + n > size:
            raise SafetensorsError(f"{path}: header length {n} out of range (file is {size} bytes)")
        raw = f.read(n)
    # load_file (_parse) validates offsets against the data when it reads it
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{path}: header JSON: {e}") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: header is not a JSON object")
    meta = header.pop("__metadata__", None) or {}
    for name, e in header.items():
        if not isinstance(e, dict) or e.get("dtype") not in _DTYPES or not isinstance(e.get("shape"), list):
            raise SafetensorsError(f"{path}: tensor {name!r}: malformed or unsupported entry {e!r}")
    return header, meta


def read_index(d: str) -> dict[str, str] | None:
    """model.safetensors.index.json's weight_map (tensor -> file), or None
    when d holds a single model.safetensors."""
    idx = os.path.join(d, INDEX_FILE)
    if not os.path.exists(idx):
        return None
    try:
        with open(idx) as f:
            index = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{idx}: {e}") from None
    wm = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(wm, dict) or not wm or not all(isinstance(k, str) and isinstance(v, str) for k, v in wm.items()):
        raise SafetensorsError(f"{idx}: weight_map must be a non-empty map of tensor name to file name")
    for name, fn in wm.items():
        if os.path.basename(fn) != fn or not fn.endswith(".safetensors"):
            raise SafetensorsError(f"{idx}: tensor {name!r} maps to {fn!r}, not a .safetensors file in {d}")
    return wm


def dir_headers(d: str) -> dict[str, tuple[str, dict]]:
    """Every tensor of a checkpoint directory: name -> (file path, header
    entry), checking that the index and the files agree (each listed tensor
    is in the file the index names, each file's tensors are listed, no name
    twice) -- without reading tensor data."""
    wm = read_index(d)
    if wm is None:
        path = os.path.join(d, SINGLE_FILE)
        if not os.path.exists(path):
            raise SafetensorsError(f"{d}: neither {SINGLE_FILE} nor {INDEX_FILE}")
        h, _ = read_header(path)
        return {n: (path, e) for n, e in h.items()}
    out: dict[str, tuple[str, dict]] = {}
    idx = os.path.join(d, INDEX_FILE)
    for fn in dict.fromkeys(wm.values()):
        path = os.path.join(d, fn)
        if not os.path.exists(path):
            raise SafetensorsError(f"{idx} names {fn}, which is missing")
        h, _ = read_header(path)
        for n, e in h.items():
            if wm.get(n) != fn:
                raise SafetensorsError(f"{path}: tensor {n!r} is not listed for this file in {idx}")
            if n in out:
                raise SafetensorsError(f"{path}: tensor {n!r} also in {out[n][0]}")
            out[n] = (path, e)
    for n, fn in wm.items():
        if n not in out:
            raise SafetensorsError(f"{idx} lists tensor {n!r} in {fn}, which does not hold it")
    return out


def load_dir(d: str, as_float32: bool = False) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Read model.safetensors, or the shards model.safetensors.index.json names
    (each listed tensor must be in the file the index names)."""
    wm = read_index(d)
    if wm is not None:
        dir_headers(d)  # index and files agree
        tensors, meta = {}, {}
        for fn in dict.fromkeys(wm.values()):
            t, m = load_file(os.path.join(d, fn), as_float32)
            tensors.update(t)
            meta.update(m)
        return tensors, meta
    return load_file(os.path.join(d, SINGLE_FILE), as_float32)


def stored_dtype(t: torch.Tensor, want: str | None) -> str:
    st = want or _TORCH_TO_ST.get(t.dtype)
    if st is None:
        raise SafetensorsError(f"unsupported dtype {t.dtype}")
    return st


def encode(tensors: dict[str, torch.Tensor], dtypes: dict[str, str] | None = None,
           metadata: dict[str, str] | None = None, hf_order: bool = False) -> bytes:
    """Serialise tensors (in the dict's order, or with hf_order in the
    safetensors library's order: descending dtype alignment, then name).
    dtypes optionally maps a name to the safetensors dtype to store it as
    (float tensors only: F32, BF16, F16)."""
    header: dict = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    kinds = {}
    for name, t in tensors.items():
        try:
            kinds[name] = stored_dtype(t, (dtypes or {}).get(name))
        except SafetensorsError as e:
            raise SafetensorsError(f"tensor {name!r}: {e}") from None
    names = list(tensors)
    if hf_order:
        names.sort(key=lambda n: (-_DTYPE_RANK[kinds[n]], n.encode()))
    chunks, pos = [], 0
    for name in names:
        t = tensors[name].detach().cpu().contiguous()
        st = kinds[name]
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


def nbytes(t: torch.Tensor, st: str) -> int:
    return t.numel() * _DTYPES[st][2]


def shard_plan(sizes: list[tuple[str, int]], max_shard_size: int) -> list[list[str]]:
    """huggingface_hub's split (split_state_dict_into_shards_factory): walk
    (name, bytes) in state-dict order; a tensor over the limit gets a shard of
    its own; otherwise a new shard starts when the next tensor would take the
    current one over the limit."""
    shards: list[list[str]] = []
    cur: list[str] = []
    cur_size = 0
    for name, n in sizes:
        if n > max_shard_size:
            shards.append([name])
            continue
        if cur and cur_size + n > max_shard_size:
            shards.append(cur)
            cur, cur_size = [], 0
        cur.append(name)
        cur_size += n
    if cur:
        shards.append(cur)
    return shards


def save_sharded(d: str, tensors: dict[str, torch.Tensor], dtypes: dict[str, str] | None = None,
                 metadata: dict[str, str] | None = None, max_shard_size: int = HF_MAX_SHARD_SIZE) -> list[str]:
    """Write tensors (an ordered state dict) into directory d as Hugging Face
    does: model.safetensors when everything fits one shard, else
    model-0000i-of-0000n.safetensors plus model.safetensors.index.json.
    Returns the file names written."""
    kinds = {n: stored_dtype(t, (dtypes or {}).get(n)) for n, t in tensors.items()}
    sizes = [(n, nbytes(t, kinds[n])) for n, t in tensors.items()]
    shards = shard_plan(sizes, max_shard_size)
    if len(shards) <= 1:
        save_file(os.path.join(d, SINGLE_FILE), tensors, kinds, metadata, hf_order=True)
        return [SINGLE_FILE]
    files, weight_map = [], {}
    for i, names in enumerate(shards):
        fn = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(os.path.join(d, fn), {n: tensors[n] for n in names}, kinds, metadata, hf_order=True)
        files.append(fn)
        weight_map.update({n: fn for n in names})
    index = {"metadata": {"total_size": sum(n for _, n in sizes)}, "weight_map": weight_map}
    atomic_write(os.path.join(d, INDEX_FILE), (json.dumps(index, indent=2, sort_keys=True) + "\n").encode())
    return files + [INDEX_FILE]


def shard_limit(d: str) -> int | None:
    """The shard size limit that reproduces d's split when the same tensors
    are written again in the same state-dict order and dtype: its largest
    shard's data size (a greedy split under that limit closes every shard
    where the original closed). None when d holds a single file."""
    wm = read_index(d)
    if wm is None:
        return None
    per_file: dict[str, int] = {}
    for n, (path, e) in dir_headers(d).items():
        b, en = e["data_offsets"]
        per_file[path] = per_file.get(path, 0) + (en - b)
    return max(per_file.values())


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
              metadata: dict[str, str] | None = None, hf_order: bool = False) -> None:
    atomic_write(path, encode(tensors, dtypes, metadata, hf_order))
