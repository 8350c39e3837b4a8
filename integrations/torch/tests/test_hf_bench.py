"""Smoke runs of the benchmarks (bench/decode.py, bench/train_step.py) at a
tiny size, in process: they run, on a given HF directory too, and print one
JSON object per measurement with the fields the report quotes."""

import importlib.util
import json
import os

import torch

from hfutil import make

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")


def run(capsys, script, *args):
    spec = importlib.util.spec_from_file_location(script[:-3], os.path.join(BENCH, script))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    threads = torch.get_num_threads()
    try:
        assert mod.main(list(args)) == 0
    finally:
        torch.set_num_threads(threads)
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]


def test_decode_bench_smoke(tmp_path, capsys):
    out = run(capsys, "decode.py", "--arch", "qwen3_moe", "--vocab", "64", "--batch", "1,2", "--prompt", "4",
              "--gen", "3", "--repeats", "1")
    assert [(r["arch"], r["vocab_size"], r["batch"]) for r in out] == [("qwen3_moe", 64, 1), ("qwen3_moe", 64, 2)]
    assert all(r["tokens_per_s"] > 0 and r["decode_tokens_per_s"] > 0 and r["threads"] == 1 for r in out)
    assert "blas" in out[0]["blas"] or "mkl" in out[0]["blas"]
    make(tmp_path / "m", "deepseek_v3")
    (r,) = run(capsys, "decode.py", "--model", str(tmp_path / "m"), "--batch", "1", "--prompt", "3", "--gen", "2",
               "--repeats", "1", "--threads", "2")
    assert r["arch"] == "deepseek_v3" and r["model"] == str(tmp_path / "m") and r["threads"] == 2


def test_train_step_bench_smoke(tmp_path, capsys):
    make(tmp_path / "m", "llama")
    (r,) = run(capsys, "train_step.py", "--model", str(tmp_path / "m"), "--groups", "1", "--n", "2", "--prompt", "3",
               "--gen", "3", "--steps", "1", "--micro", "1")
    assert r["arch"] == "llama" and r["tokens_per_s"] > 0 and 0 < r["train_s"] < r["step_s"]
