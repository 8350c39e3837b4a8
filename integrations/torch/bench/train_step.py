"""The torch trainer's throughput per step on the native HF architectures:
a TrainBatch of B groups x n sequences through the worker's real frame
handler (validation, GRPO advantages, per-microbatch forward and backward,
the SkyRL loss, AdamW, and the serving + state checkpoints). Prints one
JSON object per (model, vocab) on stdout.

  tokens_per_s          = B * n * (prompt + gen) / step_s
  trained_tokens_per_s  = B * n * gen / step_s      (loss-masked tokens)
  train_s               = step_s minus writing the two checkpoints
step_s is the median over --steps TrainBatch steps after --warmup warm-up
steps; peak_rss_mb is this process's peak resident set (run one model per
process to read it per model: --side-by-side does).

--loss chunked (default) reads the vocabulary chunk by chunk in float32
(asyncrl_worker/vocab.py); --loss float64 materialises the whole [tokens,
vocab] logits in float64 as the worker did before.

--side-by-side runs every (model, variant) in its own child process,
interleaved model by model so load drifts hit every variant alike, and
prints one JSON line per run plus a table with each variant's ratio to the
first: variants are BLAS:LOSS pairs, BLAS "netlib" (LD_LIBRARY_PATH points
the loader at netlib's reference libblas.so.3, nothing installed or
switched) or "default" (whatever libblas.so.3 is installed).

  /usr/bin/python3 integrations/torch/bench/train_step.py [--model DIR] [--arch A] [--vocab V]
      [--groups 4] [--n 8] [--prompt 32] [--gen 96] [--micro 4] [--steps 3] [--warmup 1] [--threads 1]
      [--loss chunked|float64] [--side-by-side netlib:float64,default:float64,default:chunked]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
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
        w.policy.chunked_loss = a.loss == "chunked"
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
        for step in range(1, a.steps + a.warmup + 1):
            f = batch(step, V, a.groups, a.n, a.prompt, a.gen, a.micro, a.seed)
            t0 = time.perf_counter()
            r = w.handle(f)
            dt = time.perf_counter() - t0
            if r["type"] != "StepResult":
                raise SystemExit(f"{d}: step {step}: {r}")
            if step > a.warmup:
                steps.append((dt, ck_times[-1], r["metrics"]["loss"]))
    c = w.policy.net.cfg
    S, L = a.groups * a.n, a.prompt + a.gen
    step_s = statistics.median(s for s, _, _ in steps)
    ck_s = statistics.median(c_ for _, c_, _ in steps)
    return {"bench": "torch_train_step", "model": label, "arch": c.model_type, "vocab_size": c.vocab_size,
            "params": sum(p.numel() for p in w.policy.parameters()), "groups": a.groups, "n": a.n,
            "prompt": a.prompt, "gen": a.gen, "micro": a.micro, "steps": a.steps, "threads": torch.get_num_threads(), "blas": blas_library(),
            "torch": torch.__version__, "loss_path": a.loss,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "step_s": step_s, "checkpoint_s": ck_s, "train_s": step_s - ck_s,
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
    ap.add_argument("--warmup", type=int, default=1, help="warm-up steps before the measured ones")
    ap.add_argument("--loss", choices=("chunked", "float64"), default="chunked",
                    help="how the loss reads the vocabulary (see the module doc)")
    ap.add_argument("--side-by-side", default="", metavar="BLAS:LOSS,...",
                    help="run these variants, each model in a child process per variant (see the module doc)")
    a = ap.parse_args(argv)
    if a.side_by_side:
        return side_by_side(a, argv if argv is not None else sys.argv[1:])
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


NETLIB_DIR = "/usr/lib/x86_64-linux-gnu/blas"  # Debian's libblas3: netlib's reference libblas.so.3


def _child_args(argv: list[str], drop: tuple[str, ...]) -> list[str]:
    out, skip = [], False
    for x in argv:
        if skip:
            skip = False
            continue
        name = x.split("=", 1)[0]
        if name in drop:
            skip = "=" not in x
            continue
        out.append(x)
    return out


def side_by_side(a, argv: list[str]) -> int:
    variants = [v.split(":") for v in a.side_by_side.split(",")]
    for v in variants:
        if len(v) != 2 or v[0] not in ("netlib", "default") or v[1] not in ("chunked", "float64"):
            raise SystemExit(f"--side-by-side: {':'.join(v)!r} is not BLAS:LOSS with BLAS netlib|default, LOSS chunked|float64")
    base = _child_args(argv, ("--side-by-side", "--loss", "--arch", "--model", "--vocab"))
    models = [("--model", d) for d in a.model] or [("--arch", x) for x in (a.arch or list(randinit.TINY))]
    rows = []
    load0 = os.getloadavg()
    for flag, m in models:
        for vocab in (a.vocab or [151936]) if flag == "--arch" else [None]:
            for blas, loss in variants:
                env = dict(os.environ)
                env.setdefault("OPENBLAS_NUM_THREADS", str(a.threads))  # OpenBLAS's own pool, as torch's
                if blas == "netlib":
                    env["LD_LIBRARY_PATH"] = NETLIB_DIR + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
                cmd = [sys.executable, os.path.abspath(__file__), *base, flag, m, "--loss", loss]
                if vocab is not None:
                    cmd += ["--vocab", str(vocab)]
                load = os.getloadavg()[0]
                out = subprocess.run(cmd, env=env, capture_output=True, text=True)
                if out.returncode != 0:
                    raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
                r = json.loads(out.stdout.strip().splitlines()[-1])
                r.update(variant=f"{blas}:{loss}", load_avg_1m_at_start=load)
                print(json.dumps(r), flush=True)
                rows.append(r)
    load1 = os.getloadavg()
    print(f"\n# load average (1, 5, 15 min) at start {load0}, at end {load1}; threads {a.threads}")
    print("| model | variant | BLAS | step s | train s | tokens/s | ×tokens/s vs first | peak RSS MiB | ×RSS vs first |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    first = {}
    for r in rows:
        f = first.setdefault(r["model"], r)
        print(f"| {r['model']} | {r['variant']} | {r['blas'].split(',')[0]} | {r['step_s']:.2f} | "
              f"{r['train_s']:.2f} | {r['tokens_per_s']:.1f} | {r['tokens_per_s'] / f['tokens_per_s']:.2f} | "
              f"{r['peak_rss_mb']:.0f} | {r['peak_rss_mb'] / f['peak_rss_mb']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
