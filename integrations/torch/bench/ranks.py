"""Step time of the torch worker as one rank and as a data-parallel group
(Init.group, gloo on 127.0.0.1), side by side in one run: real worker
processes over pipes (python3 -m asyncrl_worker), the same global batch,
each variant started afresh per round and the rounds interleaved so load
drift hits every variant alike.

  wall_s       Go's view: from writing the TrainBatch to every rank to the
               last rank's StepResult (checkpoint writes by rank 0 included)
  step_s       the slowest rank's own time in the step (microbatches,
               all-reduces, AdamW; not the checkpoint write)
  allreduce_s  the slowest rank's gradient all-reduce

Medians over rounds x steps after one warm-up step per round. Prints one
JSON line per variant and a table with each variant's ratio to the first.

  /usr/bin/python3 integrations/torch/bench/ranks.py [--groups 8] [--n 8] [--prompt 32] [--gen 96]
      [--micro 512] [--steps 3] [--rounds 3] [--variants 1x1,1x2,2x1]

A variant RxT is R ranks of T threads each (OMP_NUM_THREADS and
OPENBLAS_NUM_THREADS).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # asyncrl_worker

import numpy as np  # noqa: E402

from asyncrl_worker.frames import encode_frame, read_frame, tensor_obj  # noqa: E402

PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = {"vocab_size": 4096, "window": 8, "embed_dim": 64, "hidden": 512, "layers": 2, "max_seq_len": 256}
LOSS = {"policy_loss_type": "regular", "eps_clip_low": 0.2, "eps_clip_high": 0.2, "clip_ratio_c": 3.0,
        "cispo_eps_clip_low": 0.0, "cispo_eps_clip_high": 5.0, "loss_reduction": "token_mean", "max_seq_len": 0,
        "tis_ratio_type": "", "token_tis_ratio_clip_high": 2.0, "sequence_tis_ratio_clip_high": 5.0,
        "entropy_coef": 0.0, "kl_coef": 0.0, "normalize_over_support": False, "temperature": 1.0,
        "advantage": {"estimator": "grpo", "norm_adv_by_std": True, "epsilon": 1e-6}}
OPTIM = {"name": "adamw", "lr": 1e-4, "betas": [0.9, 0.99], "eps": 1e-8, "weight_decay": 0.0, "max_grad_norm": 1.0}


def batch(a, rng):
    """B*n sequences of prompt+gen tokens and a plan: microbatches of at
    most --micro tokens, dealt to the ranks round-robin per rank count."""
    S, L = a.groups * a.n, a.prompt + a.gen
    toks = rng.integers(1, MODEL["vocab_size"], size=S * L, dtype=np.int32)
    mask = np.tile(np.r_[np.zeros(a.prompt, np.uint8), np.ones(a.gen, np.uint8)], S)
    arrays = {"tokens": tensor_obj(toks), "seq_offsets": tensor_obj(np.arange(0, S * L + 1, L, dtype=np.int64)),
              "loss_mask": tensor_obj(mask), "rollout_logprobs": tensor_obj(np.full(S * L, -8.0, np.float32)),
              "versions": tensor_obj(np.where(mask == 1, 0, -1).astype(np.int64)),
              "rewards": tensor_obj(rng.random(S).astype(np.float32))}
    groups = [f"g{i // a.n}" for i in range(S)]
    per = max(1, a.micro // L)
    return arrays, groups, S, per


def plan(S, per, ranks):
    """Each rank's equal share of the sequences, packed per microbatch."""
    share = S // ranks
    micro, owner = [], []
    for r in range(ranks):
        seqs = list(range(r * share, (r + 1) * share))
        for i in range(0, len(seqs), per):
            micro.append(seqs[i:i + per])
            owner.append(r)
    return micro, owner


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_variant(a, ranks, threads, arrays, groups, S, per, out):
    # OpenBLAS (Debian's libopenblas0-pthread) sizes its own pool from
    # OPENBLAS_NUM_THREADS, not OMP_NUM_THREADS: without it every rank's
    # GEMMs use every core and two ranks oversubscribe the machine
    env = dict(os.environ, PYTHONPATH=PKG, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    procs = [subprocess.Popen([sys.executable, "-m", "asyncrl_worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              env=env) for _ in range(ranks)]
    port = free_port()
    try:
        def all_call(frames):
            for p, f in zip(procs, frames):
                p.stdin.write(encode_frame(f))
                p.stdin.flush()
            reps = [read_frame(p.stdout) for p in procs]
            for r in reps:
                if r["type"] == "Error":
                    raise RuntimeError(r)
            return reps

        init = {"v": 1, "type": "Init", "id": 1, "model": {"kind": "builtin", "path": None, "config": MODEL},
                "optimizer": OPTIM, "loss": LOSS, "seed": 1, "resume": None, "step": 0, "out_dir": out}
        frames = []
        for r in range(ranks):
            f = dict(init)
            if ranks > 1:
                f["group"] = {"rank": r, "world_size": ranks, "addr": "127.0.0.1", "port": port, "timeout_s": 60}
            frames.append(f)
        all_call(frames)
        micro, owner = plan(S, per, ranks)
        rows = []
        for step in range(1, a.steps + 2):
            tb = {"v": 1, "type": "TrainBatch", "id": 1 + step, "step": step, "arrays": arrays, "groups": groups,
                  "microbatches": micro}
            if ranks > 1:
                tb["microbatch_ranks"] = owner
            t0 = time.perf_counter()
            reps = all_call([tb] * ranks)
            wall = time.perf_counter() - t0
            if step > 1:  # one warm-up step
                rows.append({"wall_s": wall, "step_s": max(r["rank"]["step_s"] for r in reps),
                             "allreduce_s": max(r["rank"]["allreduce_s"] for r in reps),
                             "loss": reps[0]["metrics"]["loss"]})
        return rows
    finally:
        for p in procs:
            p.kill()
            p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--gen", type=int, default=96)
    ap.add_argument("--micro", type=int, default=1024, help="token cap per microbatch")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--variants", default="1x1,1x2,2x1")
    a = ap.parse_args()
    variants = [tuple(int(x) for x in v.split("x")) for v in a.variants.split(",")]
    arrays, groups, S, per = batch(a, np.random.default_rng(0))
    for r, _ in variants:
        if S % r:
            sys.exit(f"{r} ranks do not divide {S} sequences")
    res = {v: [] for v in variants}
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(a.rounds):
            for v in variants:
                res[v] += run_variant(a, v[0], v[1], arrays, groups, S, per, os.path.join(tmp, f"{v[0]}x{v[1]}-{rnd}"))
    base = None
    lines = []
    for v in variants:
        rows = res[v]
        med = {k: statistics.median(x[k] for x in rows) for k in ("wall_s", "step_s", "allreduce_s")}
        out = {"ranks": v[0], "threads": v[1], "sequences": S, "tokens": S * (a.prompt + a.gen), "samples": len(rows),
               **{k: round(x, 4) for k, x in med.items()}, "first_loss": rows[0]["loss"]}
        print(json.dumps(out), flush=True)
        base = base or med
        lines.append(f"| {v[0]} × {v[1]} | {med['wall_s']:.3f} | {med['step_s']:.3f} | {med['allreduce_s']:.4f} | "
                     f"{base['wall_s'] / med['wall_s']:.2f} |")
    print("| ranks × threads | wall_s | step_s (slowest rank) | allreduce_s | speed vs first |")
    print("|---|---|---|---|---|")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
