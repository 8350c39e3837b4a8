"""The torch trainer's throughput per step on the native HF architectures:
a TrainBatch of B groups x n sequences through the worker's real frame
handler (validation, GRPO advantages, per-microbatch forward and backward,
the SkyRL loss, AdamW, and the serving + state checkpoints). Prints one
JSON object per (model, vocab) on stdout.

  tokens_per_s          = B * n * (prompt + gen) / step_s
  trained_tokens_per_s  = B * n * gen / step_s      (loss-masked tokens)
  train_s               = step_s minus writing the two checkpoints
step_s is the median over --steps TrainBatch steps after one warm-up step.

  /usr/bin/python3 integrations/torch/bench/train_step.py [--model DIR] [--arch A] [--vocab V]
      [--groups 4] [--n 8] [--prompt 32] [--gen 96] [--micro 4] [--steps 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # asyncrl_worker
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # blas.py

import numpy as np  # noqa: E402
import torch  # noqa: E402

from asyncrl_worker.frames import tensor_obj  # noqa: E402
from asyncrl_worker.hf import randinit  # noqa: E402
from blas import blas_library  # noqa: E402
from asyncrl_worker.worker import Worker  # noqa: E402

LOSS = {"policy_loss_type": "regular", "eps_clip_low": 0.2, "eps_clip_high": 0.2, "clip_ratio_c": 3.0,
        "cispo_eps_clip_low": 0.0, "cispo_eps_clip_high": 5.0, "loss_reduction": "token_mean", "max_seq_len": 0,
        "tis_ratio_type": "token", "token_tis_ratio_clip_high": 2.0, "sequence_tis_ratio_clip_high": 5.0,
        "entropy_coef": 0.0, "kl_coef": 0.0, "normalize_over_support": False, "temperature": 1.0,
        "advantage": {"estimator": "grpo", "norm_adv_by_std": True, "epsilon": 1e-6}}
OPTIM = {"name": "adamw", "lr": 1e-4, "betas": [0.9, 0.99], "eps": 1e-8, "weight_decay": 0.0, "max_grad_norm": 1.0}


def batch(step: int, vocab: int, groups: int, n: int, prompt: int, gen: int, micro: int, seed: int) -> dict:
    g = np.random.default_rng(seed + step)
    S = groups * n
    L = prompt + gen
    toks = g.integers(0, vocab, size=(S, L)).astype(np.int32)
    mask = np.zeros((S, L), dtype=np.uint8)
    mask[:, prompt:] = 1
    arrays = {
        "tokens": tensor_obj(toks.reshape(-1)),
        "seq_offsets": tensor_obj(np.arange(0, S * L + 1, L, dtype=np.int64)),
        "loss_mask": tensor_obj(mask.reshape(-1)),
        "rollout_logprobs": tensor_obj(np.where(mask == 1, -np.log(vocab), 0).astype(np.float32).reshape(-1)),
        "versions": tensor_obj(np.where(mask == 1, step - 1, -1).astype(np.int64).reshape(-1)),
        "rewards": tensor_obj(g.integers(0, 2, size=S).astype(np.float32)),
    }
    return {"v": 1, "type": "TrainBatch", "id": step + 1, "step": step, "arrays": arrays,
            "groups": [f"p{i // n}" for i in range(S)],
            "microbatches": [list(range(i, min(i + micro, S))) for i in range(0, S, micro)]}


def bench(d: str, label: str, a) -> dict:
    w = Worker()
    with tempfile.TemporaryDirectory() as out:
        r = w.handle({"v": 1, "type": "Init", "id": 1, "model": {"kind": "hf", "path": d}, "optimizer": OPTIM,
                      "loss": LOSS, "seed": a.seed, "resume": None, "step": 0, "out_dir": out})
        if r["type"] != "Ready":
            raise SystemExit(f"{d}: {r}")
        ck_times = []
        orig = w._write_checkpoints

        def timed(step):
            t0 = time.perf_counter()
            res = orig(step)
            ck_times.append(time.perf_counter() - t0)
            return res

        w._write_checkpoints = timed
        V = w.policy.vocab_size
        steps = []
        for step in range(1, a.steps + 2):
            f = batch(step, V, a.groups, a.n, a.prompt, a.gen, a.micro, a.seed)
            t0 = time.perf_counter()
            r = w.handle(f)
            dt = time.perf_counter() - t0
            if r["type"] != "StepResult":
                raise SystemExit(f"{d}: step {step}: {r}")
            if step > 1:  # the first is the warm-up
                steps.append((dt, ck_times[-1], r["metrics"]["loss"]))
    c = w.policy.net.cfg
    S, L = a.groups * a.n, a.prompt + a.gen
    step_s = statistics.median(s for s, _, _ in steps)
    ck_s = statistics.median(c_ for _, c_, _ in steps)
    return {"bench": "torch_train_step", "model": label, "arch": c.model_type, "vocab_size": c.vocab_size,
            "params": sum(p.numel() for p in w.policy.parameters()), "groups": a.groups, "n": a.n,
            "prompt": a.prompt, "gen": a.gen, "micro": a.micro, "steps": a.steps, "threads": torch.get_num_threads(), "blas": blas_library(),
            "torch": torch.__version__, "step_s": step_s, "checkpoint_s": ck_s, "train_s": step_s - ck_s,
            "tokens_per_s": S * L / step_s, "trained_tokens_per_s": S * a.gen / step_s,
            "train_tokens_per_s": S * L / (step_s - ck_s), "losses": [x for _, _, x in steps]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", action="append", default=[], help="an HF checkpoint directory (repeatable)")
    ap.add_argument("--arch", action="append", default=[], help="a tiny preset when no --model (default all four)")
    ap.add_argument("--vocab", action="append", type=int, default=[], help="preset vocab sizes (default 151936)")
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--gen", type=int, default=96)
    ap.add_argument("--micro", type=int, default=4, help="sequences per microbatch")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    if a.model:
        for d in a.model:
            print(json.dumps(bench(d, d, a)), flush=True)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        for arch in a.arch or list(randinit.TINY):
            for V in a.vocab or [151936]:
                d = os.path.join(tmp, f"{arch}-{V}")
                randinit.make_checkpoint(d, arch, vocab_size=V, seed=a.seed)
                print(json.dumps(bench(d, f"tiny:{arch}:{V}", a)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
