"""The torch port of model/model.go and the safetensors layout of model/checkpoint.go."""

import json
import math
import os
import struct

import numpy as np
import pytest
import torch

from asyncrl_worker import safetensors as st
from asyncrl_worker.model import WindowMLP, load_serving
from util import TOY_CONFIG


def go_forward(params, cfg, tokens):
    """model.Model.forward written as Go writes it: slot k = tokens[len-1-k],
    PAD (0) before the start or outside the vocabulary; embeddings concatenated
    slot 0 first; tanh layers; head."""
    W, D, V = cfg["window"], cfg["embed_dim"], cfg["vocab_size"]
    x = []
    for k in range(W):
        i = len(tokens) - 1 - k
        tid = tokens[i] if i >= 0 else 0
        if tid < 0 or tid >= V:
            tid = 0
        x.extend(params["embed.weight"][tid])
    h = np.array(x, dtype=np.float64)
    for l in range(cfg["layers"]):
        h = np.tanh(params[f"layers.{l}.weight"] @ h + params[f"layers.{l}.bias"])
    return params["head.weight"] @ h + params["head.bias"]


def test_forward_matches_go_math():
    m = WindowMLP(TOY_CONFIG)
    m.init_weights(3)
    p = {k: v.detach().double().numpy() for k, v in m.named_tensors().items()}
    for toks in [[], [1], [1, 40, 41], list(range(3, 13)), [5, 97, 200, -1, 7]]:
        want = go_forward(p, TOY_CONFIG, toks)
        got = m.next_logits(toks).detach().double().numpy()
        assert np.allclose(got, want, atol=1e-5), toks
    # batched positions equal one-at-a-time next_logits
    seq = torch.tensor([1, 40, 41, 42, 43, 44, 45])
    pos = torch.tensor([1, 3, 6])
    batched = m.logits_at(seq, pos).detach()
    for j, i in enumerate(pos.tolist()):
        assert torch.allclose(batched[j], m.next_logits(seq[:i].tolist()).detach(), atol=1e-6)


def test_tensor_names_and_shapes_follow_policy_layout():
    m = WindowMLP(TOY_CONFIG)
    shapes = {k: list(v.shape) for k, v in m.named_tensors().items()}
    assert list(shapes) == ["embed.weight", "layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias",
                            "head.weight", "head.bias"]
    assert shapes["embed.weight"] == [98, 8] and shapes["layers.0.weight"] == [32, 4 * 8]
    assert shapes["layers.1.weight"] == [32, 32] and shapes["head.weight"] == [98, 32] and shapes["head.bias"] == [98]


def test_serving_checkpoint_layout_and_round_trip(tmp_path):
    m = WindowMLP(TOY_CONFIG)
    m.init_weights(5)
    m.save_serving(str(tmp_path), {"version": "3"})
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg == {"model_type": "asyncrl-window-mlp", **TOY_CONFIG, "torch_dtype": "bfloat16"}
    assert list(cfg)[0] == "model_type" and list(cfg)[-1] == "torch_dtype"
    raw = (tmp_path / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    assert header["__metadata__"] == {"format": "pt", "version": "3"}
    assert all(header[k]["dtype"] == "BF16" for k in header if k != "__metadata__")
    assert (8 + n) % 8 == 0
    back = load_serving(str(tmp_path))
    for (k, a), b in zip(m.named_tensors().items(), back.named_tensors().values()):
        assert torch.equal(a.detach().to(torch.bfloat16).float(), b.detach()), k


def test_bf16_rounding_is_nearest_even():
    x = np.array([1.0, 1.00390625, 1.005859375, 1.0009765625, -2.5e-3, 3.4e38, np.inf, -np.inf], dtype=np.float32)
    # 1 + 2^-8 is a tie between 1 and 1 + 2^-7 (even mantissa, 1.0, wins);
    # torch's float32 -> bfloat16 cast rounds to nearest even as Go's roundBF16.
    mine = st.f32_to_bf16_bits(x)
    ref = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().astype(np.uint16)
    assert np.array_equal(mine, ref)
    nan = st.f32_to_bf16_bits(np.array([np.nan], dtype=np.float32))
    assert (nan[0] & 0x7F80) == 0x7F80 and (nan[0] & 0x7F) != 0


def test_safetensors_all_dtypes_round_trip(tmp_path):
    ts = {"f32": torch.randn(3, 2), "bf16": torch.randn(4).to(torch.bfloat16), "f16": torch.randn(2, 2).half(),
          "i64": torch.tensor([1 << 40, -3]), "i32": torch.tensor([7, -8], dtype=torch.int32),
          "u8": torch.tensor([0, 255], dtype=torch.uint8), "empty": torch.zeros(0, 3)}
    path = str(tmp_path / "t.safetensors")
    st.save_file(path, ts, metadata={"k": "v"})
    back, meta = st.load_file(path)
    assert meta == {"k": "v"}
    for k, t in ts.items():
        assert back[k].dtype == t.dtype and torch.equal(back[k], t), k
    wide, _ = st.load_file(path, as_float32=True)
    assert wide["bf16"].dtype == torch.float32 and torch.equal(wide["bf16"], ts["bf16"].float())


def test_safetensors_rejects_gaps_and_bad_lengths(tmp_path):
    def write(header, data):
        h = json.dumps(header).encode()
        p = tmp_path / "x.safetensors"
        p.write_bytes(struct.pack("<Q", len(h)) + h + data)
        return str(p)
    with pytest.raises(st.SafetensorsError, match="gap"):
        st.load_file(write({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8))
    with pytest.raises(st.SafetensorsError, match="needs 8 bytes"):
        st.load_file(write({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 4))
    with pytest.raises(st.SafetensorsError, match="unsupported dtype"):
        st.load_file(write({"a": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}}, b"\0" * 8))


def test_sharded_checkpoint_loads(tmp_path):
    m = WindowMLP(TOY_CONFIG)
    m.init_weights(9)
    named = {k: v.detach() for k, v in m.named_tensors().items()}
    names = list(named)
    st.save_file(str(tmp_path / "model-00001-of-00002.safetensors"), {k: named[k] for k in names[:3]})
    st.save_file(str(tmp_path / "model-00002-of-00002.safetensors"), {k: named[k] for k in names[3:]})
    wm = {k: ("model-00001-of-00002.safetensors" if i < 3 else "model-00002-of-00002.safetensors") for i, k in enumerate(names)}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wm}))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "asyncrl-window-mlp", **TOY_CONFIG, "torch_dtype": "float32"}))
    back = load_serving(str(tmp_path))
    assert all(torch.equal(a, b.detach()) for a, b in zip(named.values(), back.named_tensors().values()))


def test_committed_fixture_matches_the_model():
    """tests/testdata/torch_serving is what a Go test can LoadServing; its
    expected logits must stay what this port computes from it."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata")
    with open(os.path.join(here, "torch_serving_logits.json")) as f:
        fx = json.load(f)
    m = load_serving(os.path.join(here, fx["checkpoint"]))
    for c in fx["contexts"]:
        got = m.next_logits(c["tokens"]).detach().double().numpy()
        assert np.allclose(got, c["logits"], atol=1e-6), c["tokens"]


def test_go_written_checkpoint_gives_go_logprobs():
    """Go → torch: tests/testdata/go_serving is a serving checkpoint Go's
    SaveServing wrote (the default 47k-parameter policy), and
    go_serving_logprobs.json holds the next-token logprobs Go's engine served
    from it. Loading it here must give the same distribution."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata")
    with open(os.path.join(here, "go_serving_logprobs.json")) as f:
        fx = json.load(f)
    m = load_serving(os.path.join(here, fx["checkpoint"]))
    assert m.cfg == {"vocab_size": 98, "window": 16, "embed_dim": 16, "hidden": 128, "layers": 1, "max_seq_len": 256}
    for c in fx["contexts"]:
        want = torch.tensor(c["logprobs"], dtype=torch.float64)
        with torch.no_grad():
            got = torch.log_softmax(m.next_logits(c["tokens"]).double(), -1)
        assert float((got - want).abs().max()) < 1e-5, c["tokens"]
        assert float(want.max() - want.min()) > 0.2  # not uniform: slot order or a wrong tensor would show
