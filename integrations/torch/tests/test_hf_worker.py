"""The worker's model kind hf on the native architectures, through the
frame handler: TrainBatch steps (RL losses and SFT), the serving and state
checkpoints, exact resume, Tinker's split calls, and INT4 fake quantisation
(bit for bit with weights/quant/int4.go's rule)."""

import json
import math
import os

import numpy as np
import pytest
import torch

from asyncrl_worker import model as mdl
from asyncrl_worker import safetensors as st
from asyncrl_worker.frames import tensor_obj
from asyncrl_worker.hf import checkpoint as ck
from asyncrl_worker.hf.model import CausalLM, fake_quantized
from asyncrl_worker.loss import LossConfig, sequence_weights, token_loss
from asyncrl_worker.worker import Worker

from hfutil import ARCHS, SIDE_FILES, hf_init, make
from util import LOSS, OPTIM, batch_arrays, toy_sequences, train_frame



def started(tmp_path, arch, loss=None, **kw):
    make(tmp_path / "ckpt", arch, **kw)
    w = Worker()
    r = w.handle(hf_init(tmp_path / "out", tmp_path / "ckpt", loss=loss))
    assert r["type"] == "Ready", r
    return w


def snapshot(w):
    return {n: t.detach().clone() for n, t in w.policy.net.named_tensors().items()}


@pytest.mark.parametrize("arch", ARCHS)
def test_train_batch_step_and_serving_checkpoint(tmp_path, arch):
    """One RL TrainBatch: a finite loss, changed weights, and a serving
    directory that is a complete HF checkpoint equal to the trained weights
    in BF16 (and a state directory equal to them exactly)."""
    w = started(tmp_path, arch, bias_std=0.3)
    before = snapshot(w)
    r = w.handle(train_frame(1))
    assert r["type"] == "StepResult" and r["step"] == 1, r
    m = r["metrics"]
    assert all(math.isfinite(v) for v in m.values()) and m["tokens"] == 12
    after = snapshot(w)
    assert any(not torch.equal(before[n], after[n]) for n in after)
    serving, state = r["checkpoint"], r["state"]
    assert serving == str(tmp_path / "out" / "v00000001") and state == str(tmp_path / "out" / "state-v00000001")
    names = set(os.listdir(serving))
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json", "tokenizer_config.json"} <= names
    assert open(os.path.join(serving, "tokenizer.json")).read() == SIDE_FILES["tokenizer.json"]
    cfg = json.load(open(os.path.join(serving, "config.json")))
    assert cfg["torch_dtype"] == "bfloat16" and cfg["model_type"] == arch
    back = ck.load(serving)
    for n, t in after.items():
        bias = n.endswith("e_score_correction_bias")  # a buffer: stored as it came (F32)
        assert torch.equal(back.tensors[n], t if bias else st.round_bf16(t)), n
        assert back.stored_dtypes[n] == ("F32" if bias else "BF16")
    exact = ck.load(state)
    assert json.load(open(os.path.join(state, "config.json")))["torch_dtype"] == "float32"
    for n, t in after.items():
        assert torch.equal(exact.tensors[n], t), n


@pytest.mark.parametrize("arch", ARCHS)
def test_sft_steps_on_a_fixed_batch_lower_the_loss(tmp_path, arch):
    w = started(tmp_path, arch, std=0.05)
    losses = []
    for step in range(1, 7):
        f = train_frame(step)
        f["loss"] = "cross_entropy"
        r = w.handle(f)
        assert r["type"] == "StepResult", r
        losses.append(r["metrics"]["loss"])
    assert losses[-1] < losses[0] - 0.5, losses


def test_resume_is_exact(tmp_path):
    """Two steps straight equal one step, a restart from its state
    (weights, AdamW moments, RNG) and the second step -- bit for bit."""
    make(tmp_path / "ckpt", "deepseek_v3", bias_std=0.3)
    a = Worker()
    assert a.handle(hf_init(tmp_path / "a", tmp_path / "ckpt"))["type"] == "Ready"
    r1 = a.handle(train_frame(1))
    r2 = a.handle(train_frame(2))
    b = Worker()
    assert b.handle(hf_init(tmp_path / "b", tmp_path / "ckpt", resume=r1["state"], step=1))["type"] == "Ready"
    rb = b.handle(train_frame(2))
    assert rb["type"] == "StepResult" and rb["metrics"] == r2["metrics"]
    for x, y in zip(a.policy.parameters(), b.policy.parameters()):
        assert torch.equal(x, y)
    sa, sb = a.opt.state_dict()["state"], b.opt.state_dict()["state"]
    assert all(torch.equal(sa[k]["exp_avg_sq"], sb[k]["exp_avg_sq"]) for k in sa)
    # the resumed worker's serving checkpoint still carries the tokenizer files
    assert os.path.exists(os.path.join(rb["checkpoint"], "tokenizer_config.json"))


def test_sharded_input_gives_sharded_serving_with_the_same_split(tmp_path):
    w = started(tmp_path, "qwen3_moe", max_shard_size=40_000)
    r = w.handle(train_frame(1))
    src = json.load(open(tmp_path / "ckpt" / st.INDEX_FILE))
    out = json.load(open(os.path.join(r["checkpoint"], st.INDEX_FILE)))
    assert out == src and len(set(out["weight_map"].values())) >= 3
    state = json.load(open(os.path.join(r["state"], st.INDEX_FILE)))
    assert state["weight_map"] == src["weight_map"]  # F32: the limit scales with the dtype


LOSS_VARIANTS = [
    {},
    {"policy_loss_type": "dual_clip", "loss_reduction": "sequence_mean"},
    {"policy_loss_type": "gspo", "loss_reduction": "seq_mean_token_sum_norm", "max_seq_len": 32},
    {"policy_loss_type": "cispo", "loss_reduction": "prompt_mean"},
    {"loss_reduction": "token_mean_legacy", "tis_ratio_type": "token"},
    {"tis_ratio_type": "sequence", "kl_coef": 0.5, "entropy_coef": 0.01, "temperature": 0.7},
    {"normalize_over_support": True},
]


@pytest.mark.parametrize("variant", range(len(LOSS_VARIANTS)))
def test_every_skyrl_loss_runs_on_the_model_logits(tmp_path, variant):
    """Each SkyRL loss / reduction / TIS / KL / entropy / support variant:
    the worker's loss over a two-microbatch plan equals asyncrl_worker.loss
    applied to the model's own vocabulary projection (computed here, before
    the step; tests/test_vocab.py checks that path against the float64
    logits)."""
    loss = {**LOSS, **LOSS_VARIANTS[variant]}
    w = started(tmp_path, "qwen3_moe", loss=loss)
    seqs = toy_sequences()
    arrays = batch_arrays(seqs, rollout_lp=-1.5)
    support_rows = None
    if loss.get("normalize_over_support"):
        support_rows = []
        for prompt, gen, _, _ in seqs:
            support_rows += [[-1, -1, -1]] * len(prompt) + [[t, 7, 9] for t in gen]
        arrays["support"] = tensor_obj(np.array(support_rows, dtype=np.int32))
    net = w.policy.net
    cfg = LossConfig(**{k: v for k, v in loss.items() if k != "advantage"})
    cfg.validate()
    seq_t, pos, tgt = [], [], []
    n_tok = []
    for i, (prompt, gen, _, _) in enumerate(seqs):
        s = torch.tensor(prompt + gen)
        p = torch.arange(len(prompt), len(s))
        seq_t.append(s)
        pos.append(p)
        tgt.append(s[p])
        n_tok.append(len(p))
    rewards = torch.tensor([s[2] for s in seqs], dtype=torch.float64)
    adv = torch.zeros(4, dtype=torch.float64)
    for g in ("p0", "p1"):
        idx = [i for i, s in enumerate(seqs) if s[3] == g]
        r = rewards[idx]
        adv[idx] = (r - r.mean()) / (r.std() + 1e-6)
    wts = sequence_weights(cfg, n_tok, [s[3] for s in seqs], [0, 0, 1, 1], net.cfg.max_position_embeddings)
    sup = None
    if support_rows is not None:
        sup = torch.tensor([row for row in support_rows if row[0] != -1])
    # per microbatch, as the worker runs them (an optimised BLAS rounds a
    # row differently in batches of another size)
    want_total, want_mismatch, k = 0.0, 0.0, 0
    for mb in ([0, 1], [2, 3]):
        n = sum(n_tok[i] for i in mb)
        with torch.no_grad():
            proj = w.policy.projection_many([seq_t[i] for i in mb], [pos[i] for i in mb])
        want = token_loss(cfg, proj, torch.cat([tgt[i] for i in mb]), torch.full((n,), -1.5, dtype=torch.float64),
                          torch.cat([adv[i].expand(n_tok[i]) for i in mb]),
                          torch.cat([torch.full((n_tok[i],), wts[i], dtype=torch.float64) for i in mb]),
                          torch.cat([torch.full((n_tok[i],), j) for j, i in enumerate(mb)]), 2,
                          support=None if sup is None else sup[k:k + n])
        want_total += float(want.total)
        want_mismatch += want.mismatch_sum
        k += n
    r = w.handle(train_frame(1, arrays=arrays, microbatches=[[0, 1], [2, 3]]))
    assert r["type"] == "StepResult", r
    assert math.isclose(r["metrics"]["loss"], want_total, rel_tol=1e-9, abs_tol=1e-12)
    assert math.isclose(r["metrics"]["mismatch"], want_mismatch / 12, rel_tol=1e-9)


def test_tinker_forward_backward_and_optim_step(tmp_path):
    w = started(tmp_path, "llama")
    toks = np.array([1, 40, 41, 42, 43, 5, 6, 7], dtype=np.int32)
    tgt = np.array([40, 41, 42, 43, 2, 6, 7, 2], dtype=np.int32)
    arrays = {"tokens": tensor_obj(toks), "seq_offsets": tensor_obj(np.array([0, 5, 8], dtype=np.int64)),
              "target_tokens": tensor_obj(tgt)}
    before = snapshot(w)
    r = w.handle({"v": 1, "type": "ForwardBackward", "id": 3, "loss": "cross_entropy", "arrays": arrays})
    assert r["type"] == "ForwardBackwardResult", r
    lps = np.frombuffer(r["arrays"]["logprobs"]["data"], dtype="<f4")
    with torch.no_grad():
        want = []
        for lo, hi in ((0, 5), (5, 8)):
            s = torch.tensor(toks[lo:hi], dtype=torch.long)
            lg = w.policy.net.logits_packed([torch.cat([s, torch.zeros(1, dtype=torch.long)])], [torch.arange(1, hi - lo + 1)])
            want.append(torch.log_softmax(lg.double(), -1).gather(1, torch.tensor(tgt[lo:hi], dtype=torch.long)[:, None])[:, 0])
    assert np.allclose(lps, torch.cat(want).numpy(), atol=1e-5)
    assert math.isclose(r["loss"], -float(torch.cat(want).sum()), rel_tol=1e-5)
    o = w.handle({"v": 1, "type": "OptimStep", "id": 4, "lr": 0.01, "beta1": 0.9, "beta2": 0.99, "eps": 1e-8})
    assert o["type"] == "OptimStepResult" and o["step"] == 1
    assert any(not torch.equal(before[n], t) for n, t in snapshot(w).items())
    s = w.handle({"v": 1, "type": "SaveCheckpoint", "id": 5, "dir": str(tmp_path / "sampler"), "serving": True})
    assert s["type"] == "Saved" and ck.load(str(tmp_path / "sampler")).cfg.model_type == "llama"


# --- INT4 fake quantisation ---------------------------------------------------


def _bf16(x):
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
    return b.astype(np.uint32).view(np.float32)


def int4_reference(w, group):
    """weights/quant/int4.go's FakeQuantINT4 on the BF16 weights an engine
    loads, line by line in numpy float32: per group of a row amax, scale =
    max(amax * float32(1/7), 1e-5), q = RoundToEven(w / scale) clamped to
    [-8, 7], served BF16(float32(q) * BF16(scale))."""
    w = _bf16(w)
    out = np.empty_like(w)
    rows, cols = w.shape
    for r in range(rows):
        for lo in range(0, cols, group):
            g = w[r, lo:lo + group]
            amax = np.float32(np.abs(g).max())
            s = np.maximum(np.float32(amax * np.float32(1.0 / 7)), np.float32(1e-5))
            q = np.clip(np.round((g / s).astype(np.float64)), -8, 7).astype(np.float32)
            out[r, lo:lo + group] = _bf16((q * _bf16(np.array([s]))[0]).astype(np.float32))
    return out


def test_fake_int4_is_the_go_rule_bit_for_bit():
    g = torch.Generator().manual_seed(11)
    w = torch.randn(7, 100, generator=g) * 0.05  # 100 = 3 full groups of 32 and a short one
    w[0, :8] = torch.tensor([0.5, -1.0, 1.5, -3.5, 0.0, 3.5, 1.25, -0.25])  # exact ties (2.5 / 0.5 steps)
    w[1] = 0.0
    for group in (32, 128):
        got = mdl.fake_int4(w, group).numpy()
        want = int4_reference(w.numpy(), group)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), group


def test_fake_quant_tensor_set(tmp_path):
    make(tmp_path, "deepseek_v3")
    net = ck.load_model(str(tmp_path))[0]
    q = [n for n, t in net.named_tensors().items() if fake_quantized(n, t)]
    assert "model.layers.0.mlp.gate_proj.weight" in q  # dense layer
    for part in ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj", "experts.5.down_proj",
                 "shared_experts.up_proj"):
        assert any(f".{part}.weight" in n for n in q), part
    for n in q:
        assert not any(x in n for x in ("embed", "lm_head", "norm", "mlp.gate.weight", "bias"))
    assert len(q) == sum(1 for n in net.named_tensors() if n.endswith("_proj.weight") or n.endswith("_mqa.weight"))


@pytest.mark.parametrize("arch", ["qwen3", "deepseek_v3"])
def test_fake_quant_forward_and_straight_through_gradient(tmp_path, arch):
    """With Init loss.fake_quant the forward runs on the served weights
    (INT4 projections by int4.go's rule, BF16 rest) and the gradient
    reaches the float32 masters unchanged: it equals the gradient of a
    plain model holding the served weights."""
    w = started(tmp_path, arch, loss={**LOSS, "fake_quant": "int4_g32"}, bias_std=0.3)
    net = w.policy.net
    assert net.fake_quant == "int4_g32"
    served = {}
    for n, t in net.named_tensors().items():
        if fake_quantized(n, t):
            served[n] = torch.from_numpy(int4_reference(t.detach().numpy(), 32))
        elif t.requires_grad:
            served[n] = torch.from_numpy(_bf16(t.detach().numpy()))
        else:
            served[n] = t.detach().clone()
    plain = CausalLM(net.cfg, served)
    seq = torch.randint(0, 256, (12,), generator=torch.Generator().manual_seed(2))
    pos = torch.arange(1, 12)

    def nll(m):
        return -torch.log_softmax(m.logits_at(seq, pos), -1).gather(1, seq[pos][:, None]).sum()

    a, b = nll(net), nll(plain)
    assert torch.equal(a, b)
    a.backward()
    b.backward()
    pt = plain.named_tensors()
    used = 0
    for n, t in net.named_tensors().items():
        if t.requires_grad:
            if t.grad is None:  # an expert no token was routed to
                assert pt[n].grad is None and ".experts." in n, n
                continue
            assert torch.equal(t.grad, pt[n].grad), n
            used += 1
    assert used >= 10
    r = w.handle(train_frame(1))
    assert r["type"] == "StepResult", r


@pytest.mark.parametrize("arch", ARCHS)
def test_sft_warmup_scales_the_first_step_on_the_native_architectures(tmp_path, arch):
    """optimizer.warmup_steps on a real architecture (test_sft.py checks the
    built-in model): the first SFT step with warmup 4 moves every weight a
    quarter as far as without one (Adam's first step is ~lr per weight)."""
    make(tmp_path / "ckpt", arch, std=0.05)
    moves = []
    for warm in (0, 4):
        w = Worker()
        r = w.handle(hf_init(tmp_path / f"out{warm}", tmp_path / "ckpt", optim=dict(OPTIM, warmup_steps=warm)))
        assert r["type"] == "Ready", r
        before = snapshot(w)
        f = train_frame(1)
        f["loss"] = "cross_entropy"
        r = w.handle(f)
        assert r["type"] == "StepResult", r
        after = snapshot(w)
        moves.append(torch.cat([(after[n] - before[n]).flatten().double() for n in sorted(after)]))
    full, warm = moves
    big = full.abs() > 1e-4
    assert int(big.sum()) > 100
    ratio = warm[big] / full[big]
    assert torch.allclose(ratio, torch.full_like(ratio, 0.25), atol=5e-3), (float(ratio.min()), float(ratio.max()))
