"""PyTorch eager decode throughput of the native HF architectures with a KV
cache -- the torch side of issue 29's "Go engine vs PyTorch eager"
comparison. Prints one JSON object per (model, batch) on stdout.

Definition (the same for every model and batch): B prompts of --prompt
random token ids (seeded), greedy decoding of --gen tokens each with a KV
cache (one prefill of the prompts, then --gen - 1 single-position steps),
float32 compute over the checkpoint's weights (BF16 values widened), under
torch.inference_mode, with torch.set_num_threads(--threads).
  tokens_per_s        = B * gen / (prefill_s + decode_s)   (the headline)
  decode_tokens_per_s = B * (gen - 1) / decode_s           (steady decode only)
Each figure is the median of --repeats timed runs after one warm-up run.

  /usr/bin/python3 integrations/torch/bench/decode.py --model DIR [--model DIR2 ...]
  /usr/bin/python3 integrations/torch/bench/decode.py --arch qwen3 --vocab 151936 --vocab 1024
(no --model: each --arch's tiny preset, asyncrl_worker.hf.randinit, with
each --vocab, written to a temporary directory.)
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

import torch  # noqa: E402

from asyncrl_worker.hf import checkpoint as ck  # noqa: E402
from asyncrl_worker.hf import randinit  # noqa: E402
from blas import blas_library  # noqa: E402
from asyncrl_worker.hf.model import KVCache  # noqa: E402


def run_once(net, prompts: torch.Tensor, gen: int) -> tuple[float, float, torch.Tensor]:
    B, P = prompts.shape
    with torch.inference_mode():
        t = net._tensors()
        cache = KVCache(B, P + gen)
        t0 = time.perf_counter()
        hidden, _ = net.forward_hidden(prompts, cache=cache, t=t)
        nxt = net.lm_logits(hidden[:, -1], t).argmax(-1)
        t1 = time.perf_counter()
        out = [nxt]
        for _ in range(gen - 1):
            hidden, _ = net.forward_hidden(nxt.unsqueeze(1), cache=cache, t=t)
            nxt = net.lm_logits(hidden[:, -1], t).argmax(-1)
            out.append(nxt)
        t2 = time.perf_counter()
    return t1 - t0, t2 - t1, torch.stack(out, 1)


def bench(d: str, batches: list[int], prompt: int, gen: int, repeats: int, seed: int, label: str) -> list[dict]:
    net, ld = ck.load_model(d)
    net.eval()
    c = net.cfg
    if prompt + gen > c.max_position_embeddings:
        raise SystemExit(f"{d}: prompt + gen = {prompt + gen} > max_position_embeddings {c.max_position_embeddings}")
    params = sum(t.numel() for t in net.named_tensors().values())
    out = []
    for B in batches:
        g = torch.Generator().manual_seed(seed)
        prompts = torch.randint(0, c.vocab_size, (B, prompt), generator=g)
        run_once(net, prompts, gen)  # warm-up
        pre, dec = [], []
        for _ in range(repeats):
            p, q, _ = run_once(net, prompts, gen)
            pre.append(p)
            dec.append(q)
        tot = [a + b for a, b in zip(pre, dec)]
        out.append({
            "bench": "torch_decode", "model": label, "arch": c.model_type, "vocab_size": c.vocab_size,
            "params": params, "batch": B, "prompt": prompt, "gen": gen, "threads": torch.get_num_threads(), "blas": blas_library(),
            "repeats": repeats, "torch": torch.__version__,
            "prefill_s": statistics.median(pre), "decode_s": statistics.median(dec), "total_s": statistics.median(tot),
            "tokens_per_s": B * gen / statistics.median(tot),
            "decode_tokens_per_s": B * (gen - 1) / statistics.median(dec) if gen > 1 else None,
        })
        print(json.dumps(out[-1]), flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", action="append", default=[], help="an HF checkpoint directory (repeatable)")
    ap.add_argument("--arch", action="append", default=[], help="a tiny preset when no --model (repeatable; default all four)")
    ap.add_argument("--vocab", action="append", type=int, default=[], help="vocab sizes of the presets (default 151936 and 1024)")
    ap.add_argument("--batch", default="1,32", help="comma-separated batch sizes (default 1,32)")
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    batches = [int(x) for x in a.batch.split(",") if x]
    if a.model:
        for d in a.model:
            bench(d, batches, a.prompt, a.gen, a.repeats, a.seed, d)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        for arch in a.arch or list(randinit.TINY):
            for V in a.vocab or [151936, 1024]:
                d = os.path.join(tmp, f"{arch}-{V}")
                randinit.make_checkpoint(d, arch, vocab_size=V, seed=a.seed)
                bench(d, batches, a.prompt, a.gen, a.repeats, a.seed, f"tiny:{arch}:{V}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
