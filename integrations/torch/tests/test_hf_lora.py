"""LoRA on the native architectures through the worker (Init model.lora):
only the adapter trains (B starts at zero, so a fresh adapter changes
nothing; A is seeded), the base stays bit for bit, each step writes the
merged serving checkpoint, the adapter in PEFT's layout and a resume state
that resumes exactly; bad specs are refused naming the field."""

import json
import math
import os

import pytest
import torch

from asyncrl_worker import safetensors as st
from asyncrl_worker.hf import checkpoint as ck
from asyncrl_worker.hf import lora as hflora
from asyncrl_worker.hf.model import CausalLM
from asyncrl_worker.worker import Worker

from hfutil import ARCHS, hf_init, make
from util import train_frame

OPT = {"name": "adamw", "lr": 0.05, "betas": [0.9, 0.99], "eps": 1e-8, "weight_decay": 0.0, "max_grad_norm": 1.0}
LORA = {"r": 4, "alpha": 16, "target_modules": "all-linear"}


def lora_init(tmp_path, lora=LORA, resume=None, step=0, path=None):
    f = hf_init(tmp_path / "out", path or (tmp_path / "ckpt"), optim=OPT, resume=resume, step=step)
    f["model"]["lora"] = dict(lora)
    return f


def started(tmp_path, arch, lora=LORA):
    make(tmp_path / "ckpt", arch)
    w = Worker()
    r = w.handle(lora_init(tmp_path, lora))
    assert r["type"] == "Ready", r
    return w


def logits(net, seq=(1, 40, 41, 50, 51, 52, 2)):
    with torch.no_grad():
        return net.logits_packed([torch.tensor(seq)], [torch.arange(1, len(seq))])


def merged(net, lora):
    """An independent model whose weights are W + scaling * B @ A (float64
    products) for every adapted module."""
    ts = {n: t.detach().clone() for n, t in net.named_tensors().items()}
    for m, a, b in zip(lora.modules_, lora.A, lora.B):
        w = ts[m + ".weight"]
        ts[m + ".weight"] = (w.double() + lora.scaling * (b.detach().double() @ a.detach().double())).float()
    return CausalLM(net.cfg, ts)


@pytest.mark.parametrize("arch", ARCHS)
def test_lora_trains_only_the_adapter(tmp_path, arch):
    w = started(tmp_path, arch)
    pol = w.policy
    lora = pol.lora
    base = {n: t.detach().clone() for n, t in pol.net.named_tensors().items()}
    # every projection of attention and the MLPs (experts and shared experts included)
    want = [n[:-len(".weight")] for n, _, _ in pol.net.specs if n.startswith("model.layers.")
            and (n.endswith("_proj.weight") or n.endswith("kv_a_proj_with_mqa.weight"))]
    assert lora.modules_ == want
    # PEFT's init: B zero, A ~ U(±1/sqrt(in)) and not zero
    assert all(float(b.abs().max()) == 0 for b in lora.B)
    assert all(0 < float(a.abs().max()) <= 1 / math.sqrt(a.shape[1]) for a in lora.A)
    # a fresh adapter changes nothing
    plain = CausalLM(pol.net.cfg, base)
    assert torch.equal(logits(pol.net), logits(plain))
    # the optimiser holds exactly the adapter
    assert {id(p) for g in w.opt.param_groups for p in g["params"]} == {id(p) for p in lora.parameters()}
    r = w.handle(train_frame(1))
    assert r["type"] == "StepResult", r
    assert all(math.isfinite(v) for v in r["metrics"].values())
    for n, t in pol.net.named_tensors().items():
        assert torch.equal(t, base[n]), n  # the base is frozen
    assert any(float(b.abs().max()) > 0 for b in lora.B)
    # the model computes with W + scaling * B @ A
    got, ref = logits(pol.net), logits(merged(pol.net, lora))
    assert float((got - ref).abs().max()) < 1e-4
    assert float((got - logits(plain)).abs().max()) > 1e-2  # and it moved


@pytest.mark.parametrize("arch", ["qwen3_moe", "deepseek_v3"])
def test_step_writes_merged_serving_adapter_and_state(tmp_path, arch):
    w = started(tmp_path, arch, {"r": 2, "alpha": 4, "target_modules": ["q_proj", "q_a_proj", "down_proj"]})
    r = w.handle(train_frame(1))
    assert r["type"] == "StepResult", r
    lora = w.policy.lora
    assert r["adapter"] == str(tmp_path / "out" / "adapter-v00000001")
    # the adapter: PEFT's files, names and shapes, BF16
    cfg = json.load(open(os.path.join(r["adapter"], "adapter_config.json")))
    assert cfg["peft_type"] == "LORA" and cfg["task_type"] == "CAUSAL_LM" and cfg["bias"] == "none"
    assert cfg["r"] == 2 and cfg["lora_alpha"] == 4 and cfg["target_modules"] == ["q_proj", "q_a_proj", "down_proj"]
    assert cfg["base_model_name_or_path"] == str(tmp_path / "ckpt") and cfg["use_dora"] is False
    hdr, _ = st.read_header(os.path.join(r["adapter"], "adapter_model.safetensors"))
    for m, a, b in zip(lora.modules_, lora.A, lora.B):
        ea, eb = hdr[f"base_model.model.{m}.lora_A.weight"], hdr[f"base_model.model.{m}.lora_B.weight"]
        assert ea["dtype"] == eb["dtype"] == "BF16"
        assert ea["shape"] == list(a.shape) and eb["shape"] == list(b.shape) and a.shape[0] == 2
    assert len(hdr) == 2 * len(lora.modules_)
    assert any(m.endswith("experts.0.down_proj") for m in lora.modules_)
    # read back as a LoRA: the BF16-rounded factors
    back = hflora.LoRA.load(r["adapter"], w.policy.net.specs)
    assert back.modules_ == lora.modules_ and back.scaling == lora.scaling
    for a, b in zip(back.A, lora.A):
        assert torch.equal(a, st.round_bf16(b.detach()))
    # the serving checkpoint: BF16 of the merged weights
    srv = ck.load(r["checkpoint"])
    with torch.no_grad():
        want = lora.apply({n: t.detach() for n, t in w.policy.net.named_tensors().items()})
    for n, t in want.items():
        if not n.endswith("e_score_correction_bias"):
            assert torch.equal(srv.tensors[n], st.round_bf16(t)), n
    # the state: the base in F32 and the adapter in F32
    state = hflora.LoRA.load(r["state"], w.policy.net.specs)
    for a, b in zip(state.B, lora.B):
        assert torch.equal(a, b.detach())


def test_lora_resumes_exactly(tmp_path):
    w = started(tmp_path, "qwen3_moe")
    r1 = w.handle(train_frame(1))
    r2 = w.handle(train_frame(2, rid=3))
    cont = [t.detach().clone() for t in w.policy.lora.parameters()]
    w2 = Worker()
    r = w2.handle(lora_init(tmp_path, resume=r1["state"], step=1))
    assert r["type"] == "Ready", r
    r2b = w2.handle(train_frame(2, rid=3))
    assert r2b["metrics"]["loss"] == r2["metrics"]["loss"]
    for a, b in zip(cont, w2.policy.lora.parameters()):
        assert torch.equal(a, b.detach())
    # Init must agree with the state about LoRA
    plain = hf_init(tmp_path / "out2", tmp_path / "ckpt", optim=OPT, resume=r1["state"], step=1)
    r = Worker().handle(plain)
    assert r["type"] == "Error" and r["field"] == "model.lora", r
    other = Worker().handle(lora_init(tmp_path, {"r": 8, "alpha": 16, "target_modules": "all-linear"},
                                      resume=r1["state"], step=1))
    assert other["type"] == "Error" and other["field"] == "model.lora" and "r 4" in other["message"], other


@pytest.mark.parametrize("lora,field,says", [
    ({"r": 0, "alpha": 8, "target_modules": ["q_proj"]}, "model.lora.r", "positive"),
    ({"r": 4, "alpha": -1, "target_modules": ["q_proj"]}, "model.lora.alpha", "positive"),
    ({"r": 4, "target_modules": ["q_proj"]}, "model.lora.alpha", "missing"),
    ({"r": 4, "alpha": 8, "target_modules": ["q_proj"], "dropout": 0.1}, "model.lora.dropout", "unknown"),
    ({"r": 4, "alpha": 8, "target_modules": ["gate"]}, "model.lora.target_modules", "router gate"),
    ({"r": 4, "alpha": 8, "target_modules": ["lm_head"]}, "model.lora.target_modules", "not an attention or MLP"),
    ({"r": 4, "alpha": 8, "target_modules": ["embed_tokens"]}, "model.lora.target_modules", "not an attention or MLP"),
    ({"r": 4, "alpha": 8, "target_modules": ["qkv_proj"]}, "model.lora.target_modules", "matches no module"),
    ({"r": 4, "alpha": 8, "target_modules": "("}, "model.lora.target_modules", "regular expression"),
    ({"r": 4, "alpha": 8, "target_modules": []}, "model.lora.target_modules", "non-empty"),
])
def test_bad_lora_specs_are_refused(tmp_path, lora, field, says):
    make(tmp_path / "ckpt", "qwen3_moe")
    r = Worker().handle(lora_init(tmp_path, lora))
    assert r["type"] == "Error" and r["field"] == field and says in r["message"], r


def test_lora_needs_an_hf_model(tmp_path):
    from util import init_frame
    f = init_frame(tmp_path / "out")
    f["model"]["lora"] = dict(LORA)
    r = Worker().handle(f)
    assert r["type"] == "Error" and r["field"] == "model.lora" and "kind hf" in r["message"], r


def test_regex_targets_match_as_peft(tmp_path):
    """A str target_modules is re.fullmatch'ed against module names (PEFT's
    check_target_module_exists): here only layer 1's attention."""
    w = started(tmp_path, "llama", {"r": 2, "alpha": 2, "target_modules": r"model\.layers\.1\.self_attn\.[qkvo]_proj"})
    assert w.policy.lora.modules_ == [f"model.layers.1.self_attn.{p}_proj" for p in "qkvo"]
    r = w.handle(train_frame(1))
    cfg = json.load(open(os.path.join(r["adapter"], "adapter_config.json")))
    assert cfg["target_modules"] == r"model\.layers\.1\.self_attn\.[qkvo]_proj"
