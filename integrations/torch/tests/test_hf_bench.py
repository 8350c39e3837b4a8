"""Smoke runs of the benchmarks (bench/decode.py, bench/train_step.py) at a
tiny size: they run, on a given HF directory too, and print one JSON
object per measurement with the fields the report quotes."""

import json
import os
import subprocess
import sys

from hfutil import make

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")


def run(script, *args):
    p = subprocess.run([sys.executable, os.path.join(BENCH, script), *args], capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert p.returncode == 0, p.stderr
    return [json.loads(line) for line in p.stdout.splitlines() if line.strip()]


def test_decode_bench_smoke(tmp_path):
    out = run("decode.py", "--arch", "qwen3_moe", "--vocab", "64", "--batch", "1,2", "--prompt", "4", "--gen", "3",
              "--repeats", "1")
    assert [(r["arch"], r["vocab_size"], r["batch"]) for r in out] == [("qwen3_moe", 64, 1), ("qwen3_moe", 64, 2)]
    assert all(r["tokens_per_s"] > 0 and r["decode_tokens_per_s"] > 0 and r["threads"] == 1 for r in out)
    make(tmp_path / "m", "deepseek_v3")
    (r,) = run("decode.py", "--model", str(tmp_path / "m"), "--batch", "1", "--prompt", "3", "--gen", "2",
               "--repeats", "1", "--threads", "2")
    assert r["arch"] == "deepseek_v3" and r["model"] == str(tmp_path / "m") and r["threads"] == 2


def test_train_step_bench_smoke(tmp_path):
    make(tmp_path / "m", "llama")
    (r,) = run("train_step.py", "--model", str(tmp_path / "m"), "--groups", "1", "--n", "2", "--prompt", "3",
               "--gen", "3", "--steps", "1", "--micro", "1")
    assert r["arch"] == "llama" and r["tokens_per_s"] > 0 and 0 < r["train_s"] < r["step_s"]
