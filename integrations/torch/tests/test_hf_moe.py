"""R3 route replay on the native MoE architectures (qwen3_moe, deepseek_v3):
the routes array covers the MoE layers in layer order (route_layers);
replaying the router's own choice is the plain forward pass, replaying
other experts changes it while the router still gets a gradient; the
worker takes TrainBatch.arrays.routes in that layout."""

import numpy as np
import pytest
import torch

from asyncrl_worker.frames import tensor_obj
from asyncrl_worker.hf import checkpoint as ck
from asyncrl_worker.hf.model import route_layers
from asyncrl_worker.worker import Worker

from hfutil import MOE_ARCHS, hf_init, make
from util import LOSS, batch_arrays, toy_sequences, train_frame


def load(tmp_path, arch):
    make(tmp_path, arch, bias_std=0.3)
    return ck.load_model(str(tmp_path))[0]


def test_route_layout_covers_every_decoder_layer(tmp_path):
    """Rows cover every decoder layer (the engine's / vLLM's layout); a
    dense layer's row is reported as zeros and never read on replay."""
    ds = load(tmp_path / "d", "deepseek_v3")
    assert route_layers(ds.cfg) == (0, 1, 2) and ds.cfg.moe_layer_ids == (1, 2)  # layer 0 dense
    qm = load(tmp_path / "q", "qwen3_moe")
    assert route_layers(qm.cfg) == (0, 1)
    seq = list(range(10))
    r = ds.routes(seq)
    assert r.shape == (10, 3, 2) and int(r[:, 1:].min()) >= 0 and int(r[:, 1:].max()) < 8
    assert not r[:, 0].any()
    junk = r.clone()
    junk[:, 0] = 7  # a repeated id: would be refused in an MoE layer's row
    t, pos = torch.tensor(seq), torch.arange(1, 10)
    with torch.no_grad():
        assert torch.equal(ds.logits_at(t, pos, r), ds.logits_at(t, pos, junk))
    bad = r.clone()
    bad[:, 1] = 7
    with pytest.raises(ValueError, match="listed twice"):
        ds.logits_at(t, pos, bad)


@pytest.mark.parametrize("arch", MOE_ARCHS)
def test_replaying_own_routes_is_the_plain_pass(tmp_path, arch):
    net = load(tmp_path, arch)
    seq = torch.randint(0, 256, (15,), generator=torch.Generator().manual_seed(3))
    pos = torch.arange(1, 15)
    own = net.routes(seq.tolist())
    with torch.no_grad():
        plain = net.logits_at(seq, pos)
        replay = net.logits_at(seq, pos, own)
    assert torch.equal(plain, replay)


@pytest.mark.parametrize("arch", MOE_ARCHS)
def test_replaying_other_experts_changes_output_and_trains_the_router(tmp_path, arch):
    net = load(tmp_path, arch)
    E = net.cfg.num_experts
    seq = torch.randint(0, 256, (15,), generator=torch.Generator().manual_seed(3))
    pos = torch.arange(1, 15)
    own = net.routes(seq.tolist())
    other = (own + 3) % E  # still distinct within a row
    logits = net.logits_at(seq, pos, other)
    with torch.no_grad():
        plain = net.logits_at(seq, pos)
    assert float((logits - plain).abs().max()) > 1e-3
    lp = torch.log_softmax(logits, -1).gather(1, seq[pos].unsqueeze(1)).sum()
    lp.backward()
    ts = net.named_tensors()
    for l in net.cfg.moe_layer_ids:
        g = ts[f"model.layers.{l}.mlp.gate.weight"].grad
        assert g is not None and float(g.abs().sum()) > 0, l
        # the replayed experts got gradient, one never chosen did not (the
        # last row routes the pass after the last token, which predicts nothing here)
        used = set(other[:-1, route_layers(net.cfg).index(l)].flatten().tolist())
        for e in range(E):
            gw = ts[f"model.layers.{l}.mlp.experts.{e}.up_proj.weight"].grad
            assert (gw is not None and float(gw.abs().sum()) > 0) == (e in used), (l, e)
    if arch == "deepseek_v3":  # the bias is selection only: never part of the gradient
        assert ts["model.layers.1.mlp.gate.e_score_correction_bias"].grad is None


@pytest.mark.parametrize("arch", MOE_ARCHS)
def test_replay_gates_come_from_this_router(tmp_path, arch):
    """With routes replayed, the layer output is sum_k w_k expert_k(x) with
    w from this router's scores at the replayed ids (qwen3_moe: softmax,
    renormalised; deepseek_v3: sigmoid without the bias, normalised, times
    routed_scaling_factor) -- checked on one MoE block directly."""
    net = load(tmp_path, arch)
    c = net.cfg
    t = dict(net.named_tensors())
    l = c.moe_layer_ids[0]
    m = f"model.layers.{l}.mlp."
    g = torch.Generator().manual_seed(9)
    h = torch.randn(6, c.hidden_size, generator=g)
    sel = torch.stack([torch.randperm(c.num_experts, generator=g)[:c.top_k] for _ in range(6)])
    with torch.no_grad():
        got, used = net._moe(t, m, h, sel)
        logit = h @ t[m + "gate.weight"].T
        if arch == "qwen3_moe":
            p = torch.softmax(logit, -1).gather(1, sel)
            w = p / p.sum(-1, keepdim=True)
            shared = 0
        else:
            p = torch.sigmoid(logit).gather(1, sel)
            w = p / (p.sum(-1, keepdim=True) + 1e-20) * c.routed_scaling_factor
            sp = m + "shared_experts."
            shared = (torch.nn.functional.silu(h @ t[sp + "gate_proj.weight"].T) * (h @ t[sp + "up_proj.weight"].T)) @ t[sp + "down_proj.weight"].T
        want = torch.zeros_like(h)
        for n in range(6):
            for k in range(c.top_k):
                ep = f"{m}experts.{int(sel[n, k])}."
                x = h[n]
                y = (torch.nn.functional.silu(t[ep + "gate_proj.weight"] @ x) * (t[ep + "up_proj.weight"] @ x))
                want[n] += w[n, k] * (t[ep + "down_proj.weight"] @ y)
        want = want + shared
    assert torch.equal(used, sel)
    assert torch.allclose(got, want, atol=1e-5)


def _routes_for(net, seqs):
    rows = []
    for prompt, gen, _, _ in seqs:
        rows.append(net.routes(prompt + gen).numpy())
    return np.concatenate(rows).astype(np.int32)


@pytest.mark.parametrize("arch", MOE_ARCHS)
def test_worker_replays_train_batch_routes(tmp_path, arch):
    """TrainBatch.arrays.routes [T, MoE layers, top_k]: the model's own
    routes train exactly as no routes; other experts train differently; a
    wrong layer count is refused naming arrays.routes."""
    make(tmp_path / "ckpt", arch, bias_std=0.3)
    seqs = toy_sequences()
    base = Worker()
    assert base.handle(hf_init(tmp_path / "o0", tmp_path / "ckpt"))["type"] == "Ready"
    own = _routes_for(base.policy.net, seqs)
    results = {}
    for name, rows in [("none", None), ("own", own), ("other", (own + 1) % 8)]:
        w = Worker()
        assert w.handle(hf_init(tmp_path / ("o" + name), tmp_path / "ckpt"))["type"] == "Ready"
        arrays = batch_arrays(seqs)
        if rows is not None:
            arrays["routes"] = tensor_obj(rows)
        r = w.handle(train_frame(1, arrays=arrays))
        assert r["type"] == "StepResult", r
        # mismatch = mean |trainer logprob - rollout logprob|: the logits' trace in the metrics
        results[name] = (r["metrics"]["mismatch"], [p.detach().clone() for p in w.policy.parameters()])
    assert results["none"][0] == results["own"][0]
    assert all(torch.equal(a, b) for a, b in zip(results["none"][1], results["own"][1]))
    assert results["other"][0] != results["none"][0]
    assert not all(torch.equal(a, b) for a, b in zip(results["none"][1], results["other"][1]))
    arrays = batch_arrays(seqs)
    arrays["routes"] = tensor_obj(own[:, :1])
    r = base.handle(train_frame(1, arrays=arrays))
    assert r["type"] == "Error" and r["field"] == "arrays.routes" and "want [" in r["message"]
    moe_row = base.policy.route_read_layers()[0]
    twice = own.copy()
    twice[3, moe_row] = twice[3, moe_row, 0]
    arrays["routes"] = tensor_obj(twice)
    r = base.handle(train_frame(1, arrays=arrays))
    assert r["type"] == "Error" and r["field"] == "arrays.routes" and "token 3" in r["message"], r
    if arch == "deepseek_v3":  # the dense layer's row is not read: anything goes
        junk = own.copy()
        junk[:, 0] = 5
        arrays["routes"] = tensor_obj(junk)
        assert base.handle(train_frame(1, arrays=arrays))["type"] == "StepResult"


def test_dense_hf_model_refuses_routes(tmp_path):
    make(tmp_path / "ckpt", "qwen3")
    w = Worker()
    assert w.handle(hf_init(tmp_path / "out", tmp_path / "ckpt"))["type"] == "Ready"
    arrays = batch_arrays(toy_sequences())
    T = len(np.frombuffer(arrays["tokens"]["data"], dtype="<i4"))
    arrays["routes"] = tensor_obj(np.zeros((T, 2, 2), dtype=np.int32))
    r = w.handle(train_frame(1, arrays=arrays))
    assert r["type"] == "Error" and r["field"] == "arrays.routes" and "no routed experts" in r["message"]
