"""asyncrl/SkyRL delta versions: parse, verify, apply.

The format is asyncrl's Go codec, weights/delta (doc.go, manifest.go,
encode.go, apply.go, checksum.go), itself SkyRL's delta weight sync
(shared/reference/skyrl.md "Delta weight sync"):

* A version lives in ``delta-{version:08d}/``: payload files, then
  ``manifest.json`` written last (its presence commits the version).
  Version 0 is the base checkpoint, never a delta; version v has
  base_version v-1. An unchanged publish still advances, with empty
  "tensors" and "payload_files".
* Per changed tensor: the new bytes, cast to the base checkpoint's dtype,
  XORed with the previously published bytes, compressed as one zstd frame
  (that records its content size), stored as a U8 tensor of
  compressed_num_bytes under ``payload_key`` in a payload safetensors file
  ``delta-rank{r:05d}-file{i:06d}.safetensors``. Unchanged tensors are
  omitted (applying leaves them as they are).
* ``checksum`` is of the NEW tensor bytes: "xxh3-128" as python-xxhash's
  ``xxh3_128(data).hexdigest()`` prints it (32 hex digits, what Go's
  XXH3Hex writes), or "sha256" (64 hex digits, accepted on read). An older
  entry with a "sha256" field instead of checksum/checksum_algorithm is
  read; an absent checksum_algorithm means xxh3-128.
* dtype is torch's name without "torch." ("bfloat16", "float8_e4m3fn");
  safetensors spellings ("BF16") and the "torch." prefix are accepted.
  FP8 (F8_E4M3/F8_E5M2) tensors are plain 1-byte elements: the XOR and the
  checksum work on raw bytes, no conversion happens.
* Skip-absent: a manifest tensor that the local checkpoint lacks is
  skipped and reported (tied weights, buffers: apply.go ApplyResult.Skipped);
  one present with another dtype or shape is a mismatch.

Application is two-phase (stricter than Go's Apply, which may leave a
checkpoint half-patched): ``prepare`` reads and decompresses every patch and
verifies every checksum without touching the current bytes; only then does
``PreparedDelta.apply`` XOR the patches in place (decompressing again from
the kept compressed bytes, so memory holds one decompressed patch at a time).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Mapping, Optional, Tuple

import numpy as np
import xxhash
import zstandard

from .safetensors_io import DTYPE_SIZES, SafetensorsError, SafetensorsFile

MANIFEST_NAME = "manifest.json"
CHECKSUM_XXH3 = "xxh3-128"
CHECKSUM_SHA256 = "sha256"


class DeltaError(Exception):
    """Base of every error here; the message names the version and tensor."""


class ManifestError(DeltaError):
    """manifest.json is malformed or inconsistent (Go: ErrManifest)."""


class ChecksumError(DeltaError):
    """A patched tensor's checksum does not match the manifest (ErrChecksum)."""


class CorruptError(DeltaError):
    """A payload is missing, truncated or does not decompress to the declared size (ErrCorrupt)."""


class MismatchError(DeltaError):
    """The local checkpoint and the manifest disagree on a dtype or shape (ErrMismatch)."""


class ChainError(DeltaError):
    """The version or base_version does not follow the version held (ErrChain)."""


class NoVersionError(DeltaError):
    """The version has no manifest.json (not committed) (ErrNoVersion)."""


def delta_dir_name(version: int) -> str:
    return f"delta-{version:08d}"


_DTYPE_ALIASES = {
    "bfloat16": "BF16", "bf16": "BF16",
    "float16": "F16", "half": "F16", "f16": "F16",
    "float32": "F32", "float": "F32", "f32": "F32",
    "float64": "F64", "double": "F64", "f64": "F64",
    "int8": "I8", "i8": "I8",
    "uint8": "U8", "u8": "U8",
    "int16": "I16", "i16": "I16",
    "uint16": "U16", "u16": "U16",
    "int32": "I32", "i32": "I32",
    "uint32": "U32", "u32": "U32",
    "int64": "I64", "long": "I64", "i64": "I64",
    "uint64": "U64", "u64": "U64",
    "bool": "BOOL",
    "float8_e4m3fn": "F8_E4M3", "f8_e4m3": "F8_E4M3",
    "float8_e5m2": "F8_E5M2", "f8_e5m2": "F8_E5M2",
    "float8_e8m0fnu": "F8_E8M0", "f8_e8m0": "F8_E8M0",
}


def normalize_dtype(s: str) -> str:
    """Manifest dtype (torch or safetensors spelling) -> safetensors dtype, as Go's NormalizeDType."""
    t = s.lower()
    if t.startswith("torch."):
        t = t[len("torch."):]
    if t in _DTYPE_ALIASES:
        return _DTYPE_ALIASES[t]
    if s.upper() in DTYPE_SIZES:
        return s.upper()
    raise ValueError(f"unknown dtype {s!r}")


def checksum(algo: str, data) -> str:
    if algo == CHECKSUM_XXH3:
        return xxhash.xxh3_128(data).hexdigest()
    if algo == CHECKSUM_SHA256:
        return hashlib.sha256(data).hexdigest()
    raise ValueError(f"unknown checksum_algorithm {algo!r} (want {CHECKSUM_XXH3!r} or {CHECKSUM_SHA256!r})")


@dataclass(frozen=True)
class TensorEntry:
    name: str
    dtype: str  # normalised safetensors dtype ("BF16")
    shape: Tuple[int, ...]
    uncompressed_num_bytes: int
    compressed_num_bytes: int
    payload_file: str
    payload_key: str
    checksum: str
    checksum_algorithm: str


@dataclass
class Manifest:
    version: int
    base_version: int
    tensors: List[TensorEntry]
    total_uncompressed_num_bytes: int
    total_compressed_num_bytes: int
    payload_files: List[str]


def _int(obj: dict, key: str, where: str) -> int:
    v = obj.get(key)
    if not isinstance(v, int) or isinstance(v, bool):
        raise ManifestError(f"{where}: {key} is {v!r}, want an integer")
    return v


def _str(obj: dict, key: str, where: str) -> str:
    v = obj.get(key)
    if not isinstance(v, str):
        raise ManifestError(f"{where}: {key} is {v!r}, want a string")
    return v


def parse_manifest(data: bytes) -> Manifest:
    """Decodes and validates manifest.json as Go's ParseManifest/Validate do.
    Unknown fields are ignored."""
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ManifestError(f"manifest.json: {e}") from None
    if not isinstance(obj, dict):
        raise ManifestError("manifest.json is not a JSON object")
    version = _int(obj, "version", "manifest")
    base = _int(obj, "base_version", "manifest")
    if version < 1 or base < 0 or base >= version:
        raise ManifestError(f"manifest: version {version} with base_version {base} (need 0 <= base_version < version)")
    files = obj.get("payload_files") or []
    tensors = obj.get("tensors") or []
    if not isinstance(files, list) or not isinstance(tensors, list):
        raise ManifestError(f"manifest of version {version}: tensors and payload_files must be lists")
    seen_files = set()
    for f in files:
        if not isinstance(f, str) or not f or "/" in f or "\\" in f or f.startswith("."):
            raise ManifestError(f"manifest of version {version}: payload file {f!r} is not a plain file name")
        if f in seen_files:
            raise ManifestError(f"manifest of version {version}: payload file {f!r} listed twice")
        seen_files.add(f)
    entries: List[TensorEntry] = []
    names, keys = set(), set()
    unc = comp = 0
    for raw in tensors:
        if not isinstance(raw, dict):
            raise ManifestError(f"manifest of version {version}: tensor entry {raw!r} is not an object")
        name = raw.get("name")
        where = f"manifest of version {version}: tensor {name!r}"
        if not isinstance(name, str) or not name or name in names:
            raise ManifestError(f"{where}: name empty or repeated")
        names.add(name)
        try:
            dtype = normalize_dtype(_str(raw, "dtype", where))
        except ValueError as e:
            raise ManifestError(f"{where}: {e}") from None
        shape = raw.get("shape")
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
            raise ManifestError(f"{where}: shape {shape!r} is not a list of integers")
        if any(d < 0 for d in shape):
            raise ManifestError(f"{where}: negative dimension in {shape}")
        n = DTYPE_SIZES[dtype]
        for d in shape:
            n *= d
        u = _int(raw, "uncompressed_num_bytes", where)
        c = _int(raw, "compressed_num_bytes", where)
        if u != n:
            raise ManifestError(f"{where}: uncompressed_num_bytes {u} but {raw['dtype']}{shape} holds {n}")
        if c <= 0:
            raise ManifestError(f"{where}: compressed_num_bytes {c}")
        pf = _str(raw, "payload_file", where)
        if pf not in seen_files:
            raise ManifestError(f"{where}: payload_file {pf!r} is not in payload_files")
        pk = raw.get("payload_key")
        if not isinstance(pk, str) or not pk or (pf, pk) in keys:
            raise ManifestError(f"{where}: payload_key {pk!r} empty or repeated in {pf}")
        keys.add((pf, pk))
        sum_ = raw.get("checksum") or ""
        algo = raw.get("checksum_algorithm") or ""
        if not sum_ and raw.get("sha256"):  # older SkyRL spelling
            sum_ = raw["sha256"]
            algo = algo or CHECKSUM_SHA256
        algo = algo or CHECKSUM_XXH3  # SkyRL's default when the field is absent
        want = {CHECKSUM_XXH3: 32, CHECKSUM_SHA256: 64}.get(algo)
        if want is None:
            raise ManifestError(f"{where}: unknown checksum_algorithm {algo!r} (want {CHECKSUM_XXH3!r} or {CHECKSUM_SHA256!r})")
        if not isinstance(sum_, str) or len(sum_) != want:
            raise ManifestError(f"{where}: {algo} checksum {sum_!r}: want {want} hex digits")
        try:
            bytes.fromhex(sum_)
        except ValueError:
            raise ManifestError(f"{where}: {algo} checksum {sum_!r} is not hex") from None
        entries.append(TensorEntry(name, dtype, tuple(shape), u, c, pf, pk, sum_.lower(), algo))
        unc += u
        comp += c
    tu = _int(obj, "total_uncompressed_num_bytes", f"manifest of version {version}")
    tc = _int(obj, "total_compressed_num_bytes", f"manifest of version {version}")
    if tu != unc or tc != comp:
        raise ManifestError(f"manifest of version {version}: totals {tu}/{tc} but the tensors sum to {unc}/{comp} (uncompressed/compressed)")
    return Manifest(version, base, entries, tu, tc, list(files))


def resolve_version_dir(dir: str, version: int) -> str:
    """The directory holding version's manifest.json: dir itself (a version
    directory) or dir/delta-{version:08d} (dir is the sync root)."""
    if os.path.isfile(os.path.join(dir, MANIFEST_NAME)):
        return dir
    sub = os.path.join(dir, delta_dir_name(version))
    if os.path.isfile(os.path.join(sub, MANIFEST_NAME)):
        return sub
    raise NoVersionError(f"version {version}: no {MANIFEST_NAME} in {dir} or {sub} (not committed)")


def read_manifest_dir(dir: str, version: int) -> Manifest:
    """Reads a version directory's manifest and checks it says version."""
    try:
        with open(os.path.join(dir, MANIFEST_NAME), "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise NoVersionError(f"version {version}: no {MANIFEST_NAME} in {dir} (not committed)") from None
    try:
        m = parse_manifest(raw)
    except ManifestError as e:
        raise ManifestError(f"version {version} ({dir}): {e}") from None
    if m.version != version:
        raise ChainError(f"{os.path.join(dir, MANIFEST_NAME)} says version {m.version}, but version {version} was asked for")
    return m


def decompress_patch(comp: bytes, want: int, where: str) -> np.ndarray:
    """Decompresses one patch (zstd frames, as Go's DecodeAll reads them),
    reading at most want+1 bytes so a bad frame cannot blow up memory."""
    out = np.empty(want, dtype=np.uint8)
    mv = memoryview(out)
    got = 0
    try:
        r = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(comp), read_across_frames=True)
        while got < want:
            n = r.readinto(mv[got:])
            if n == 0:
                break
            got += n
        extra = len(r.read(1))
    except zstandard.ZstdError as e:
        raise CorruptError(f"{where}: zstd: {e}") from None
    if got != want or extra:
        raise CorruptError(f"{where}: patch decompresses to {'more than ' if extra else ''}{got} bytes, want {want}")
    return out


@dataclass
class CurrentTensor:
    """A tensor's current bytes as the state keeps them."""

    dtype: str
    shape: Tuple[int, ...]
    data: np.ndarray  # uint8, C order, writable


@dataclass
class PreparedDelta:
    """A delta version verified against the current bytes and not yet applied."""

    manifest: Manifest
    todo: List[TensorEntry]
    compressed: Dict[str, bytes]  # by tensor name
    skipped: List[str] = field(default_factory=list)

    def apply(self, current: Mapping[str, CurrentTensor]) -> Iterator[str]:
        """XORs each patch into current[name].data in place, yielding each name
        once its bytes are the new ones. Call only on the bytes prepare saw."""
        for e in self.todo:
            where = f"version {self.manifest.version}: tensor {e.name!r}"
            patch = decompress_patch(self.compressed[e.name], e.uncompressed_num_bytes, where)
            np.bitwise_xor(current[e.name].data, patch, out=current[e.name].data)
            yield e.name


def prepare(manifest: Manifest, payload_dir: str, current: Mapping[str, CurrentTensor]) -> PreparedDelta:
    """Checks the manifest against current (dtypes, shapes), reads every
    patch (a U8 tensor of compressed_num_bytes under payload_key),
    decompresses it to uncompressed_num_bytes and verifies the checksum of
    current XOR patch. current is not modified. Raises MismatchError,
    CorruptError or ChecksumError (naming every bad tensor)."""
    v = manifest.version
    todo, skipped = [], []
    for e in manifest.tensors:
        cur = current.get(e.name)
        if cur is None:
            skipped.append(e.name)
            continue
        if cur.dtype != e.dtype or tuple(cur.shape) != tuple(e.shape):
            raise MismatchError(f"version {v}: tensor {e.name!r} is {e.dtype}{list(e.shape)} in the manifest, {cur.dtype}{list(cur.shape)} in the loaded checkpoint")
        if cur.data.nbytes != e.uncompressed_num_bytes:
            raise MismatchError(f"version {v}: tensor {e.name!r}: {cur.data.nbytes} bytes loaded, manifest says {e.uncompressed_num_bytes}")
        todo.append(e)
    skipped.sort()
    files: Dict[str, SafetensorsFile] = {}
    for name in manifest.payload_files:
        path = os.path.join(payload_dir, name)
        try:
            files[name] = SafetensorsFile(path)
        except (OSError, SafetensorsError) as err:
            raise CorruptError(f"version {v}: payload {name}: {err}") from None
    compressed: Dict[str, bytes] = {}
    bad: List[str] = []
    for e in todo:
        where = f"version {v}: tensor {e.name!r}"
        pf = files[e.payload_file]
        info = pf.tensors.get(e.payload_key)
        if info is None:
            raise CorruptError(f"{where}: payload key {e.payload_key!r} is not in {e.payload_file}")
        if info.dtype != "U8" or info.nbytes != e.compressed_num_bytes:
            raise CorruptError(f"{where}: payload is {info.dtype} of {info.nbytes} bytes in {e.payload_file}, manifest says U8 of {e.compressed_num_bytes}")
        try:
            comp = pf.read(e.payload_key).tobytes()
        except (OSError, SafetensorsError) as err:
            raise CorruptError(f"{where}: {err}") from None
        patch = decompress_patch(comp, e.uncompressed_num_bytes, where)
        np.bitwise_xor(patch, current[e.name].data, out=patch)  # patch now holds the new bytes
        got = checksum(e.checksum_algorithm, patch)
        del patch
        if got != e.checksum:
            # Keep going: report every bad tensor, not just the first (as Go's Apply).
            bad.append(f"{where}: {e.checksum_algorithm} {got}, manifest says {e.checksum}")
            continue
        compressed[e.name] = comp
    if bad:
        raise ChecksumError("checksum mismatch: " + "; ".join(bad))
    return PreparedDelta(manifest, todo, compressed, skipped)
