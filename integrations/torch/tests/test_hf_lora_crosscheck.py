"""A LoRA adapter trained by the worker, served by the Go engine (issue 29):
on each architecture, one TrainBatch of the worker with model.lora writes
a PEFT adapter directory; `asyncrl engine --weights BASE` loads it over
vLLM's /v1/load_lora_adapter and answers completions for `model: <adapter>`
with the logprobs torch computes for base + adapter (read back from the
adapter's files), within test_hf_crosscheck.py's bound -- while requests
for the base get exactly the answers they got before the load. The adapter
moves the logprobs far past that bound, so an engine that ignored it, or
applied it to the wrong module, scale or transpose, fails here. Needs the
asyncrl binary (ASYNCRL_BIN or go on PATH)."""

import json
import urllib.request

import pytest
import torch

from asyncrl_worker.hf import checkpoint as ck
from asyncrl_worker.hf import lora as hflora
from asyncrl_worker.worker import Worker
from hfutil import hf_init
from test_hf_crosscheck import ARCHS, BOUND, PROMPTS, VOCAB, decode_routes, engine, go_generate, init, max_diff  # noqa: F401
from test_interop import asyncrl_bin, post  # noqa: F401
from util import train_frame

# lr 0.05: one Adam step moves every B entry by ~0.05, so the adapter's
# B @ A * (alpha / r = 4) is a few percent of the base weights
OPT = {"name": "adamw", "lr": 0.05, "betas": [0.9, 0.99], "eps": 1e-8, "weight_decay": 0.0, "max_grad_norm": 1.0}


def load_lora(url, name, path):
    """vLLM's /v1/load_lora_adapter (a plain-text 200)."""
    req = urllib.request.Request(url + "/v1/load_lora_adapter", data=json.dumps(
        {"lora_name": name, "lora_path": str(path)}).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.status == 200
        return r.read().decode()


@pytest.mark.parametrize("arch", ARCHS)
def test_go_engine_serves_the_trained_adapter(asyncrl_bin, engine, tmp_path, arch):  # noqa: F811
    base = tmp_path / "base"
    init(asyncrl_bin, base, arch)
    w = Worker()
    f = hf_init(tmp_path / "out", base, optim=OPT)
    f["model"]["lora"] = {"r": 4, "alpha": 16, "target_modules": "all-linear"}
    assert w.handle(f)["type"] == "Ready"
    r = w.handle(train_frame(1))
    assert r["type"] == "StepResult", r
    adapter = r["adapter"]

    url = engine(base)
    model, body, before = go_generate(url)
    assert "Success" in load_lora(url, "trained", adapter)
    # base requests are unaffected by the load
    after = post(url + "/v1/completions", body)
    for a, b in zip(before["choices"], after["choices"]):
        assert a["token_ids"] == b["token_ids"] and a["logprobs"] == b["logprobs"]
    lora_body = {**body, "model": "trained"}
    got = post(url + "/v1/completions", lora_body)
    assert got["model"] == "trained"

    # torch: the base checkpoint plus the adapter's files (BF16 factors)
    net = ck.load_model(str(base))[0]
    net.set_adapter(hflora.LoRA.load(adapter, net.specs))
    for ch in got["choices"]:
        p = PROMPTS[ch["index"]]
        with torch.no_grad():
            lg = net.logits_packed([torch.tensor(p + ch["token_ids"])], [torch.arange(len(p), len(p) + len(ch["token_ids"]))])
        assert ch["token_ids"] == [int(i) for i in lg.argmax(-1)], (arch, ch["index"])
    diff = max_diff(net, got["choices"])
    # the adapter matters: the base's logprobs at the adapter's tokens are far off
    plain = ck.load_model(str(base))[0]
    moved = max_diff(plain, got["choices"])
    print(f"{arch}: max |go - torch| logprob with the adapter {diff:.2e}; base vs adapter {moved:.2f}")
    assert diff < BOUND, (arch, diff)
    assert moved > 100 * BOUND, (arch, moved)

    if arch in ("qwen3_moe", "deepseek_v3"):
        # the adapted model's routed experts are torch's too
        resp = post(url + "/v1/completions", {**lora_body, "logprobs": None, "return_routed_experts": True})
        for ch in resp["choices"]:
            seq = PROMPTS[ch["index"]] + ch["token_ids"]
            go = decode_routes(ch["routed_experts"])
            ours = net.routes(seq[:-1])
            layers = list(net.cfg.moe_layer_ids)
            assert torch.equal(go[:, layers], ours[:, layers]), arch
