"""Test helpers: a Python encoder of asyncrl delta versions (weights/delta
encode.go, for the pure-Python tests; the Go encoder is used by
test_go_interop.py) and a torch model whose state_dict names are checkpoint
names."""

import json
import os

import numpy as np
import torch
import xxhash
import zstandard

from asyncrl_vllm import safetensors_io as sio
from asyncrl_vllm.delta import delta_dir_name

TORCH_NAMES = {"BF16": "bfloat16", "F32": "float32", "F16": "float16", "I64": "int64", "I32": "int32",
               "U8": "uint8", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}


def encode_delta(base, new, version, root, algo="xxh3-128"):
    """base/new: {name: (dtype, shape, bytes)}; writes root/delta-{v:08d}/."""
    vdir = os.path.join(root, delta_dir_name(version))
    os.makedirs(vdir, exist_ok=True)
    entries, payload = [], []
    pf = "delta-rank00000-file000000.safetensors"
    for name in sorted(base):
        if name not in new:
            raise ValueError(name)
        bd, bs, bb = base[name]
        nd, ns, nb = new[name]
        assert bd == nd and list(bs) == list(ns)
        if bb == nb:
            continue
        patch = np.bitwise_xor(np.frombuffer(bb, np.uint8), np.frombuffer(nb, np.uint8)).tobytes()
        comp = zstandard.ZstdCompressor(level=1, write_content_size=True).compress(patch)
        import hashlib
        sum_ = xxhash.xxh3_128(nb).hexdigest() if algo == "xxh3-128" else hashlib.sha256(nb).hexdigest()
        entries.append({"name": name, "dtype": TORCH_NAMES[bd], "shape": list(bs), "uncompressed_num_bytes": len(patch),
                        "compressed_num_bytes": len(comp), "payload_file": pf, "payload_key": name,
                        "checksum": sum_, "checksum_algorithm": algo})
        payload.append((name, "U8", [len(comp)], comp))
    files = []
    if payload:
        sio.write_file(os.path.join(vdir, pf), payload)
        files = [pf]
    man = {"version": version, "base_version": version - 1, "tensors": entries,
           "total_uncompressed_num_bytes": sum(e["uncompressed_num_bytes"] for e in entries),
           "total_compressed_num_bytes": sum(e["compressed_num_bytes"] for e in entries),
           "payload_files": files}
    with open(os.path.join(vdir, "manifest.json"), "w") as f:
        json.dump(man, f, indent=2)
    return vdir, man


def raw(tensors):
    """{name: torch tensor} -> {name: (dtype, shape, bytes)}"""
    return {n: (sio.safetensors_dtype(t.dtype), list(t.shape), sio.tensor_bytes(t)) for n, t in tensors.items()}


def write_ckpt(dir, tensors, max_shard_bytes=0):
    sio.write_checkpoint(dir, [(n, d, s, b) for n, (d, s, b) in raw(tensors).items()], max_shard_bytes)
    return dir


def perturb(t, seed, frac=1.0):
    """A copy of t with some elements changed (all when frac=1)."""
    g = torch.Generator().manual_seed(seed)
    out = t.clone()
    flat = out.view(-1)
    n = max(1, int(flat.numel() * frac))
    idx = torch.randperm(flat.numel(), generator=g)[:n]
    if out.dtype.is_floating_point:
        flat[idx] = flat[idx] + torch.randn(n, generator=g).to(out.dtype) * 0.5 + 0.25
    else:
        flat[idx] = flat[idx] + 1
    return out


class TinyModel(torch.nn.Module):
    """Submodules, parameters and buffers laid out so state_dict() names are
    the checkpoint names; load_weights copies by name, as vLLM's
    model.load_weights(weights=...) does for an unfused model."""

    def __init__(self, specs):
        super().__init__()
        for name, (dtype, shape) in specs.items():
            *path, leaf = name.split(".")
            mod = self
            for part in path:
                if not hasattr(mod, part):
                    mod.add_module(part, torch.nn.Module())
                mod = getattr(mod, part)
            t = torch.zeros(shape, dtype=dtype)
            if dtype.is_floating_point:
                mod.register_parameter(leaf, torch.nn.Parameter(t, requires_grad=False))
            else:
                mod.register_buffer(leaf, t)
        self.loaded = []

    def tensor(self, name):
        return self.state_dict(keep_vars=True)[name]

    def load_weights(self, weights):
        sd = self.state_dict(keep_vars=True)
        with torch.no_grad():
            for name, w in weights:
                sd[name].copy_(w)
                self.loaded.append(name)


class FakeModelRunner:
    def __init__(self, model):
        self.model = model


def bytes_of(t):
    return sio.tensor_bytes(t)
