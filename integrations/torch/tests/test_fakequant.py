"""trainer.fake_quant in the torch worker: the forward pass runs on the INT4
weights Go's engine serves with engines.quantize (model.Model.Quantized),
gradients pass straight through to the float32 masters."""

import json
import os

import pytest
import torch

from asyncrl_worker import model as mdl
from asyncrl_worker.worker import Worker
from util import TOY_CONFIG, init_frame

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata")


@pytest.mark.parametrize("scheme", [0, 1])
def test_fake_quant_forward_is_go_int4_serving(scheme):
    """go_int4_logits.json (written and kept current by Go's
    TestINT4TorchFixture) holds the logits Go's engine serves from go_serving
    quantised to int4_g32 / int4_g128; the worker's fake-quantised forward on
    the same checkpoint gives them, where its dense forward does not."""
    with open(os.path.join(HERE, "go_int4_logits.json")) as f:
        fx = json.load(f)
    s = fx["schemes"][scheme]
    m = mdl.load_serving(os.path.join(HERE, fx["checkpoint"]))
    for c in s["contexts"]:
        want = torch.tensor(c["logits"])
        with torch.no_grad():
            dense = m.next_logits(c["tokens"])
            m.fake_quant = s["quant"]
            got = m.next_logits(c["tokens"])
            m.fake_quant = "none"
        assert float((got - want).abs().max()) < 1e-5, (s["quant"], c["tokens"])
        assert float((dense - want).abs().max()) > 1e-3  # the quantisation shows


def test_fake_int4_format():
    """Values of a group are q * scale with |q| <= 7, scale = amax/7 as BF16;
    a zero group stays zero; round half to even (2.5 -> 2)."""
    w = torch.tensor([[1.0, -2.0, 3.0, -7.0, 0.0, 7.0, 2.5, -0.5], [0.0] * 8])
    got = mdl.fake_int4(w, 8)
    assert got[0].tolist() == [1.0, -2.0, 3.0, -7.0, 0.0, 7.0, 2.0, 0.0]
    assert got[1].abs().sum() == 0
    r = torch.randn(4, 100, generator=torch.Generator().manual_seed(1)) * 0.05
    q = mdl.fake_int4(r, 32)
    for g in range(4):
        blk = r[:, g * 32:(g + 1) * 32]
        s = mdl.bf16(mdl.bf16(blk).abs().amax(1, keepdim=True) * torch.tensor(1 / 7))
        codes = q[:, g * 32:(g + 1) * 32] / s
        assert float((codes - codes.round()).abs().max()) < 0.03  # BF16 rounding of q*s: unit roundoff 2^-8 of up to 7
        assert float(codes.round().abs().max()) == 7


def test_ste_gradient_is_dense_gradient_at_served_weights():
    """The fake-quantised net's gradient equals a dense net's whose weights
    are the served ones (INT4 Linear weights, BF16 rest), and the masters
    stay float32 off the INT4 grid."""
    torch.manual_seed(3)
    cfg = {"vocab_size": 98, "window": 4, "embed_dim": 8, "hidden": 64, "layers": 2, "max_seq_len": 64}
    net = mdl.WindowMLP(cfg)
    net.init_weights(3)
    net.fake_quant = "int4_g32"
    served = mdl.WindowMLP(cfg)
    with torch.no_grad():
        for (name, p), q in zip(net.named_parameters(), served.parameters()):
            quantized = p.dim() == 2 and name != "embed.weight"
            q.copy_(mdl.fake_int4(p, 32) if quantized else mdl.bf16(p))
    toks = torch.tensor([1, 40, 41, 42, 43, 44, 45, 2])
    pos = torch.arange(1, len(toks))

    def loss(m):
        lp = torch.log_softmax(m.logits_at(toks, pos), -1)
        return -lp.gather(1, toks[pos].unsqueeze(1)).sum()

    loss(net).backward()
    loss(served).backward()
    for (name, p), q in zip(net.named_parameters(), served.parameters()):
        assert torch.equal(p.grad, q.grad), name
    w = net.layers[0].weight
    assert not torch.equal(w, mdl.fake_int4(w, 32))


def load_moe_int4_fixture():
    with open(os.path.join(HERE, "go_moe_int4.json")) as f:
        return json.load(f)


@pytest.mark.parametrize("scheme", [0, 1])
def test_fake_quant_moe_is_go_int4_serving(scheme):
    """go_moe_int4.json (written and kept current by Go's
    TestINT4MoETorchFixture) holds what Go's engine serves from the go_moe
    mixture quantised to int4_g32 / int4_g128: the tensors it quantises,
    the routes and logprobs under its own routing, and the logprobs with
    other experts replayed. The worker's fake-quantised forward on the same
    checkpoint quantises the same tensors and gives the same routes and
    logprobs, replayed or not; its plain forward does not."""
    fx = load_moe_int4_fixture()
    s = fx["schemes"][scheme]
    m = mdl.load_serving(os.path.join(HERE, fx["checkpoint"]))
    assert [n for n, t in m.named_tensors().items() if mdl.fake_quantized(n, t)] == s["quantized"]
    L, K = m.cfg["layers"], m.cfg["top_k"]
    for c in s["cases"]:
        toks = c["tokens"]
        want = torch.tensor(c["logprobs"], dtype=torch.float64)
        seq = torch.tensor(toks + [0], dtype=torch.long)
        rows = torch.tensor(c["routes"]).reshape(len(toks), L, K)
        rows = torch.cat([rows, torch.arange(K).expand(1, L, K)])  # padding row for the predicted slot
        rows[len(toks) - 1] = torch.tensor(c["replay_routes"]).reshape(L, K)
        with torch.no_grad():
            dense = torch.log_softmax(m.next_logits(toks).double(), -1)
            m.fake_quant = s["quant"]
            got = torch.log_softmax(m.next_logits(toks).double(), -1)
            routes = m.routes(toks)
            replay = torch.log_softmax(m.logits_at(seq, torch.tensor([len(toks)]), rows)[0].double(), -1)
            m.fake_quant = "none"
        assert routes.flatten().tolist() == c["routes"], (s["quant"], toks)
        assert float((got - want).abs().max()) < 1e-5, (s["quant"], toks)
        assert float((replay - torch.tensor(c["replay_logprobs"], dtype=torch.float64)).abs().max()) < 1e-5, (s["quant"], toks)
        assert float((dense - want).abs().max()) > 1e-3  # the quantisation shows


MOE_CONFIG = {**TOY_CONFIG, "hidden": 32, "experts": 4, "top_k": 2}


@pytest.mark.parametrize("replay", [False, True])
def test_moe_ste_gradient_is_dense_gradient_at_served_weights(replay):
    """For a mixture the fake-quantised net's gradient equals, tensor for
    tensor, that of a plain net holding the served weights (INT4 expert and
    head weights, BF16 rest), under its own routing and with routes
    replayed; the masters stay float32 off the INT4 grid, and the served
    router weights and biases are BF16, not INT4."""
    net = mdl.WindowMLP(MOE_CONFIG)
    net.init_weights(5)
    with torch.no_grad():
        for layer in net.layers:  # biases off zero, so quantising them would show
            layer.experts_bias.normal_(0, 0.5, generator=torch.Generator().manual_seed(6))
    net.fake_quant = "int4_g32"
    served = mdl.WindowMLP(MOE_CONFIG)
    with torch.no_grad():
        for (name, p), q in zip(net.named_tensors().items(), served.named_tensors().values()):
            q.copy_(mdl.fake_int4(p, 32) if mdl.fake_quantized(name, p) else mdl.bf16(p))
    toks = torch.tensor([1, 40, 41, 42, 43, 44, 45, 2])
    pos = torch.arange(1, len(toks))
    routes = None
    if replay:
        own = served.routes(toks.tolist())
        routes = (own + 1) % MOE_CONFIG["experts"]  # other experts, still distinct per layer

    def loss(m):
        lp = torch.log_softmax(m.logits_at(toks, pos, routes), -1)
        return -lp.gather(1, toks[pos].unsqueeze(1)).sum()

    loss(net).backward()
    loss(served).backward()
    for (name, p), q in zip(net.named_tensors().items(), served.named_tensors().values()):
        assert p.grad is not None and torch.equal(p.grad, q.grad), name
        assert float(p.grad.abs().sum()) > 0, name
    w = net.layers[0].experts_weight
    assert not torch.equal(w, mdl.fake_int4(w, 32))
    for t in (served.layers[0].experts_bias, served.layers[0].router_weight):
        assert not torch.equal(t, mdl.fake_int4(t, 32))


def test_init_fake_quant_moe(tmp_path):
    """Init accepts loss.fake_quant for the built-in mixture of experts."""
    loss = dict(init_frame(tmp_path)["loss"], fake_quant="int4_g32")
    w = Worker()
    assert w.handle(init_frame(tmp_path, config=MOE_CONFIG, loss=loss))["type"] == "Ready"
    assert w.policy.net.fake_quant == "int4_g32" and w.policy.net.experts == 4


def test_init_fake_quant_option(tmp_path):
    """Init's loss.fake_quant switches the builtin net to fake quantisation;
    an unknown format is a bad field naming it; absent means none."""
    w = Worker()
    assert w.handle(init_frame(tmp_path))["type"] == "Ready"
    assert w.policy.net.fake_quant == "none"
    loss = dict(init_frame(tmp_path)["loss"], fake_quant="int4_g128")
    w = Worker()
    assert w.handle(init_frame(tmp_path, loss=loss))["type"] == "Ready"
    assert w.policy.net.fake_quant == "int4_g128"
    loss["fake_quant"] = "fp8"
    r = Worker().handle(init_frame(tmp_path, loss=loss))
    assert r["type"] == "Error" and r["field"] == "loss.fake_quant", r
