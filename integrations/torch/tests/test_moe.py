"""The mixture-of-experts variant of the built-in policy (model/moe.go) and its
route replay (R3) in the torch port: Go → torch on a checkpoint and numbers Go
wrote (testdata/go_moe, go_moe_fixture.json: model/moefixture_test.go writes
them; torch → Go is that file's TestLoadTorchMoECheckpoint)."""

import json
import os

import pytest
import torch

from asyncrl_worker.model import WindowMLP, load_serving, read_config, write_config

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata")
TINY = {"vocab_size": 9, "window": 2, "embed_dim": 3, "hidden": 5, "layers": 2, "max_seq_len": 16,
        "experts": 4, "top_k": 2}


def load_fixture():
    with open(os.path.join(HERE, "go_moe_fixture.json")) as f:
        return json.load(f)


def test_go_moe_checkpoint_gives_go_logprobs_and_routes():
    fx = load_fixture()
    m = load_serving(os.path.join(HERE, fx["checkpoint"]))
    assert m.cfg["experts"] == 4 and m.cfg["top_k"] == 2 and m.cfg["layers"] == 2
    for c in fx["cases"]:
        toks = c["tokens"]
        with torch.no_grad():
            got = torch.log_softmax(m.next_logits(toks).double(), -1)
            routes = m.routes(toks)
        assert routes.flatten().tolist() == c["routes"], toks
        assert float((got - torch.tensor(c["logprobs"], dtype=torch.float64)).abs().max()) < 1e-5, toks


def test_replayed_routes_give_go_replay_logprobs():
    """Replaying other experts at the last position (a sequence's routes rows,
    row p-1 predicts token p) gives Go's ForwardReplay numbers, which differ
    from the own-routing ones."""
    fx = load_fixture()
    m = load_serving(os.path.join(HERE, fx["checkpoint"]))
    L, K = m.cfg["layers"], m.cfg["top_k"]
    for c in fx["cases"]:
        toks = c["tokens"]
        seq = torch.tensor(toks + [0], dtype=torch.long)  # the predicted token's slot
        rows = torch.tensor(c["routes"]).reshape(len(toks), L, K)
        rows = torch.cat([rows, torch.arange(K).expand(1, L, K)])  # padding row for the last position
        rows[len(toks) - 1] = torch.tensor(c["replay_routes"]).reshape(L, K)
        with torch.no_grad():
            got = torch.log_softmax(m.logits_at(seq, torch.tensor([len(toks)]), rows)[0].double(), -1)
        want = torch.tensor(c["replay_logprobs"], dtype=torch.float64)
        assert float((got - want).abs().max()) < 1e-5, toks
        assert float((want - torch.tensor(c["logprobs"], dtype=torch.float64)).abs().max()) > 0.05


def test_replay_keeps_the_router_gradient_and_fixes_the_experts():
    """With routes replayed the chosen experts are the given ones (a weight
    change that flips the router's own choice does not change which experts
    run) and the router still gets a gradient through the gates."""
    torch.manual_seed(0)
    m = WindowMLP(TINY)
    m.init_weights(3)
    toks = torch.tensor([1, 4, 5, 6, 7])
    pos = torch.arange(1, 5)
    own = m.routes(toks.tolist())
    other = (own + 1) % 4
    logits = m.logits_at(toks, pos, other)
    assert not torch.allclose(logits, m.logits_at(toks, pos))
    logits.logsumexp(-1).sum().backward()
    for layer in m.layers:
        assert layer.router_weight.grad is not None and float(layer.router_weight.grad.abs().sum()) > 0
        used = set(other[:, list(m.layers).index(layer)].flatten().tolist())
        for e in range(4):
            g = float(layer.experts_weight.grad[e].abs().sum())
            assert (g > 0) == (e in used), (e, used)


def test_routes_are_checked():
    m = WindowMLP(TINY)
    m.init_weights(1)
    toks = torch.tensor([1, 4, 5])
    pos = torch.tensor([2])
    good = m.routes(toks.tolist())
    for bad, msg in [(good[:2], "route rows"), (good.clone().fill_(4), "outside"),
                     (torch.zeros_like(good), "listed twice")]:
        with pytest.raises(ValueError, match=msg):
            m.logits_at(toks, pos, bad)
    dense = WindowMLP({k: v for k, v in TINY.items() if k not in ("experts", "top_k")})
    with pytest.raises(ValueError, match="dense"):
        dense.logits_at(toks, pos, good)
    for cfg, msg in [({**TINY, "top_k": 5}, "top_k must be in"), ({**TINY, "experts": 0}, "top_k must be 0")]:
        with pytest.raises(ValueError, match=msg):
            WindowMLP(cfg)


def test_dense_config_json_has_no_moe_keys(tmp_path):
    dense = {k: v for k, v in TINY.items() if k not in ("experts", "top_k")}
    write_config(str(tmp_path), dense, "bfloat16")
    body = json.loads((tmp_path / "config.json").read_text())
    assert "experts" not in body and "top_k" not in body
    assert read_config(str(tmp_path)) == dense


def test_moe_save_load_round_trip(tmp_path):
    m = WindowMLP(TINY)
    m.init_weights(7)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(p.to(torch.bfloat16).float())  # BF16-exact, so the round trip is exact
    m.save_serving(str(tmp_path))
    back = load_serving(str(tmp_path))
    assert list(back.named_tensors()) == ["embed.weight",
                                          "layers.0.experts.weight", "layers.0.router.weight", "layers.0.experts.bias",
                                          "layers.1.experts.weight", "layers.1.router.weight", "layers.1.experts.bias",
                                          "head.weight", "head.bias"]
    with torch.no_grad():
        assert torch.equal(back.next_logits([1, 2, 3]), m.next_logits([1, 2, 3]))
    assert torch.equal(back.routes([1, 2, 3]), m.routes([1, 2, 3]))
