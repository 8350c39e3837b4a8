"""Hugging Face checkpoint directories of the native architectures: load
(validated completely before a model exists) and save (as HF writes them).

A directory holds config.json, model.safetensors or model-0000i-of-0000n
shards with model.safetensors.index.json (asyncrl_worker.safetensors writes
both as huggingface_hub / safetensors do), generation_config.json and the
tokenizer files. Loading refuses, naming the file and the tensor: an
architecture that is not native, a missing tensor, a wrong shape, a tensor
that belongs to no module of the config, a tokenizer whose ids do not fit
the embedding. Nothing is half-loaded: the model is built only from a
complete, checked tensor set.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections import OrderedDict
from dataclasses import dataclass, field

import torch

from .. import safetensors as st
from .config import ArchConfig, ConfigError, load_config
from .model import CausalLM, tensor_specs

GENERATION_CONFIG = "generation_config.json"
TOKENIZER_FILE = "tokenizer.json"
_ITEMSIZE = {"F32": 4, "BF16": 2, "F16": 2}
# files of a checkpoint directory that are weights or trainer state, not
# side files (tokenizer, generation config, chat template, README) to copy
_NOT_SIDE = re.compile(r"(config\.json|.*\.safetensors|model\.safetensors\.index\.json|.*\.(bin|pt|pth|ckpt|msgpack|h5))$")


class CheckpointError(ValueError):
    """A checkpoint directory the native models refuse (message names the
    file and the tensor or field)."""


@dataclass
class Loaded:
    cfg: ArchConfig
    tensors: dict  # name -> float32 tensor, every tensor_specs name
    src_dir: str
    stored_dtypes: dict = field(default_factory=dict)  # name -> safetensors dtype in the source
    shard_limit: int | None = None  # bytes: the source's split rule (None = single file)

    def shard_limit_for(self, dtype: str) -> int | None:
        """The source's shard limit rescaled to tensors stored as dtype
        (the same split for a homogeneous checkpoint)."""
        if self.shard_limit is None:
            return None
        src = _ITEMSIZE.get(self.stored_dtypes.get("model.embed_tokens.weight", "BF16"), 2)
        return self.shard_limit * _ITEMSIZE[dtype] // src


def _ignorable(cfg: ArchConfig, name: str) -> bool:
    """Tensors HF skips on load: DeepSeek's multi-token-prediction layers
    past num_hidden_layers ([DM] _keys_to_ignore_on_load_unexpected
    model.layers.61.*) and old rotary inv_freq buffers."""
    if name.endswith("rotary_emb.inv_freq"):
        return True
    m = re.match(r"model\.layers\.(\d+)\.", name)
    return cfg.mla and m is not None and int(m.group(1)) >= cfg.num_hidden_layers


def tokenizer_max_id(d: str) -> tuple[int, int] | None:
    """(largest token id, number of tokens) of d/tokenizer.json, or None
    when d has none."""
    p = os.path.join(d, TOKENIZER_FILE)
    if not os.path.exists(p):
        return None
    try:
        with open(p) as f:
            tok = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{p}: {e}") from None
    ids: list[int] = []
    vocab = (tok.get("model") or {}).get("vocab") if isinstance(tok, dict) else None
    if isinstance(vocab, dict):
        ids += [v for v in vocab.values() if isinstance(v, int)]
    elif isinstance(vocab, list):  # Unigram: [[piece, score], ...], id = index
        ids += range(len(vocab))
    for a in (tok.get("added_tokens") or []) if isinstance(tok, dict) else []:
        if isinstance(a, dict) and isinstance(a.get("id"), int):
            ids.append(a["id"])
    if not ids:
        raise CheckpointError(f"{p}: no token ids (model.vocab and added_tokens are empty)")
    return max(ids), len(set(ids))


def check_names(cfg: ArchConfig, d: str, headers: dict) -> None:
    """Every tensor the config implies is present with its shape and a
    float dtype; nothing else is (save the ignorable)."""
    where = os.path.join(d, st.INDEX_FILE) if os.path.exists(os.path.join(d, st.INDEX_FILE)) \
        else os.path.join(d, st.SINGLE_FILE)
    specs = tensor_specs(cfg)
    known = {n for n, _, _ in specs}
    for name, shape, _ in specs:
        if name not in headers:
            raise CheckpointError(f"{where}: tensor {name!r} is missing ({cfg.model_type} with this config.json "
                                  f"has {len(specs)} tensors)")
        path, e = headers[name]
        if tuple(e["shape"]) != tuple(shape):
            raise CheckpointError(f"{path}: tensor {name!r} has shape {e['shape']}, config.json implies {list(shape)}")
        if e["dtype"] not in _ITEMSIZE:
            raise CheckpointError(f"{path}: tensor {name!r} is {e['dtype']}, want F32, BF16 or F16")
    for name, (path, _) in headers.items():
        if name in known or _ignorable(cfg, name):
            continue
        if name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue  # checked against the embedding once read
        raise CheckpointError(f"{path}: tensor {name!r} is not part of a {cfg.model_type} with this config.json")


def load(d: str) -> Loaded:
    """Read and check the checkpoint directory d completely."""
    try:
        cfg = load_config(d)
        headers = st.dir_headers(d)
    except (ConfigError, st.SafetensorsError) as e:
        raise CheckpointError(str(e)) from None
    except OSError as e:
        raise CheckpointError(f"{d}: {e}") from None
    check_names(cfg, d, headers)
    tm = tokenizer_max_id(d)
    if tm is not None and tm[0] >= cfg.vocab_size:
        raise CheckpointError(f"{os.path.join(d, TOKENIZER_FILE)}: token id {tm[0]} does not fit tensor "
                              f"'model.embed_tokens.weight' of {cfg.vocab_size} rows (config.json vocab_size)")
    try:
        raw, _ = st.load_dir(d, as_float32=True)
        limit = st.shard_limit(d)
    except (st.SafetensorsError, OSError) as e:
        raise CheckpointError(str(e)) from None
    tensors = {n: raw[n] for n, _, _ in tensor_specs(cfg)}
    if cfg.tie_word_embeddings and "lm_head.weight" in raw and not torch.equal(raw["lm_head.weight"], tensors["model.embed_tokens.weight"]):
        raise CheckpointError(f"{headers['lm_head.weight'][0]}: tensor 'lm_head.weight' differs from "
                              "'model.embed_tokens.weight' but config.json ties them (tie_word_embeddings)")
    for n, t in tensors.items():
        if not torch.isfinite(t).all():
            raise CheckpointError(f"{headers[n][0]}: tensor {n!r} holds a NaN or infinite value")
    return Loaded(cfg=cfg, tensors=tensors, src_dir=d,
                  stored_dtypes={n: headers[n][1]["dtype"] for n in tensors}, shard_limit=limit)


def load_model(d: str) -> tuple[CausalLM, Loaded]:
    ld = load(d)
    return CausalLM(ld.cfg, ld.tensors), ld


def copy_side_files(src: str, dst: str) -> list[str]:
    """Copy src's tokenizer / generation / template files (every regular
    file that is not weights, config.json or trainer state) into dst."""
    out = []
    if not src or not os.path.isdir(src):
        return out
    for name in sorted(os.listdir(src)):
        p = os.path.join(src, name)
        if name.startswith(".") or not os.path.isfile(p) or _NOT_SIDE.fullmatch(name):
            continue
        shutil.copyfile(p, os.path.join(dst, name))
        out.append(name)
    return out


def write_json(path: str, obj) -> None:
    """As transformers writes config.json: indent 2, sorted keys, newline."""
    st.atomic_write(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


def save(d: str, net: CausalLM, dtype: str = "BF16", src_dir: str | None = None,
         metadata: dict | None = None, max_shard_size: int | None = None,
         buffer_dtypes: dict | None = None, tensors: dict | None = None) -> list[str]:
    """Write net as an HF checkpoint directory d (which must exist):
    config.json (the model's, torch_dtype set to dtype), the weights in
    dtype (the router correction bias in buffer_dtypes' dtype, F32 by
    default, as HF keeps it), sharded under max_shard_size bytes (None: one
    file unless over HF's 5 GB default), the side files of src_dir, and a
    generation_config.json made from config.json's bos/eos ids when src_dir
    has none. tensors (name -> tensor) replaces net's values, e.g. a LoRA's
    merged projections; which are buffers is still net's. Returns the
    weight files written."""
    ts = net.named_tensors()
    kinds = {n: (dtype if t.requires_grad else (buffer_dtypes or {}).get(n, "F32")) for n, t in ts.items()}
    if tensors is not None:
        ts = OrderedDict((n, tensors[n]) for n in ts)
    md = {"format": "pt", **(metadata or {})}
    files = st.save_sharded(d, ts, kinds, md, max_shard_size or st.HF_MAX_SHARD_SIZE)
    raw = dict(net.cfg.raw)
    torch_dtype = {"BF16": "bfloat16", "F32": "float32", "F16": "float16"}[dtype]
    raw["torch_dtype"] = torch_dtype
    if "dtype" in raw:  # transformers v5 writes "dtype"
        raw["dtype"] = torch_dtype
    write_json(os.path.join(d, "config.json"), raw)
    copied = copy_side_files(src_dir, d) if src_dir else []
    if GENERATION_CONFIG not in copied:
        gen = {k: raw[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if raw.get(k) is not None}
        write_json(os.path.join(d, GENERATION_CONFIG), gen)
    return files
