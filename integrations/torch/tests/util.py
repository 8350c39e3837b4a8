"""Helpers shared by the tests: toy models, batches and frames."""

import numpy as np

from asyncrl_worker.frames import tensor_obj

TOY_CONFIG = {"vocab_size": 98, "window": 4, "embed_dim": 8, "hidden": 32, "layers": 2, "max_seq_len": 64}

LOSS = {
    "policy_loss_type": "regular", "eps_clip_low": 0.2, "eps_clip_high": 0.2, "clip_ratio_c": 3.0,
    "cispo_eps_clip_low": 0.0, "cispo_eps_clip_high": 5.0, "loss_reduction": "token_mean", "max_seq_len": 0,
    "tis_ratio_type": "", "token_tis_ratio_clip_high": 2.0, "sequence_tis_ratio_clip_high": 5.0,
    "entropy_coef": 0.0, "kl_coef": 0.0, "normalize_over_support": False, "temperature": 1.0,
    "advantage": {"estimator": "grpo", "norm_adv_by_std": True, "epsilon": 1e-6},
}

OPTIM = {"name": "adamw", "lr": 0.01, "betas": [0.9, 0.99], "eps": 1e-8, "weight_decay": 0.0, "max_grad_norm": 1.0}


def init_frame(out_dir, rid=1, path=None, config=TOY_CONFIG, loss=None, resume=None, step=0, seed=7, optim=None):
    return {"v": 1, "type": "Init", "id": rid,
            "model": {"kind": "builtin", "path": path, "config": config},
            "optimizer": dict(optim or OPTIM), "loss": dict(loss or LOSS), "seed": seed,
            "resume": resume, "step": step, "out_dir": str(out_dir)}


def toy_sequences():
    """Two prompts, two answers each: (prompt, generation, reward, group)."""
    return [
        ([1, 40, 41], [50, 51, 52, 2], 1.0, "p0"),
        ([1, 40, 41], [60, 61, 2], 0.0, "p0"),
        ([1, 70, 71, 72], [80, 81, 2], 1.0, "p1"),
        ([1, 70, 71, 72], [90, 2], 0.0, "p1"),
    ]


def batch_arrays(seqs, rollout_lp=-2.0, with_adv=None):
    toks, mask, off = [], [], [0]
    for prompt, gen, _, _ in seqs:
        toks += prompt + gen
        mask += [0] * len(prompt) + [1] * len(gen)
        off.append(len(toks))
    T = len(toks)
    arrays = {
        "tokens": tensor_obj(np.array(toks, dtype=np.int32)),
        "seq_offsets": tensor_obj(np.array(off, dtype=np.int64)),
        "loss_mask": tensor_obj(np.array(mask, dtype=np.uint8)),
        "rollout_logprobs": tensor_obj(np.full(T, rollout_lp, dtype=np.float32)),
        "versions": tensor_obj(np.where(np.array(mask) == 1, 0, -1).astype(np.int64)),
        "rewards": tensor_obj(np.array([s[2] for s in seqs], dtype=np.float32)),
    }
    if with_adv is not None:
        arrays["advantages"] = tensor_obj(np.array(with_adv, dtype=np.float32))
    return arrays


def train_frame(step, rid=2, seqs=None, arrays=None, microbatches=None):
    seqs = seqs or toy_sequences()
    f = {"v": 1, "type": "TrainBatch", "id": rid, "step": step,
         "arrays": arrays or batch_arrays(seqs), "groups": [s[3] for s in seqs]}
    if microbatches is not None:
        f["microbatches"] = microbatches
    return f
