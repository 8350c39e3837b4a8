"""HF checkpoint directories of the native architectures: read and written
byte for byte as Hugging Face writes them (single file and sharded), and
refused -- naming the file and the tensor -- when they do not fit the
config, before anything is loaded."""

import json
import os
import struct

import pytest
import torch

from asyncrl_worker import safetensors as st
from asyncrl_worker.hf import checkpoint as ck
from asyncrl_worker.hf import randinit
from asyncrl_worker.hf.config import ConfigError, parse_config
from asyncrl_worker.hf.model import tensor_specs
from asyncrl_worker.worker import Worker

from hfutil import ARCHS, hf_init, make


def files_of(d):
    return {n: open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d))}


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("shard", [None, 40_000])
def test_load_save_round_trip_is_byte_exact(tmp_path, arch, shard):
    """A checkpoint written as HF writes it (randinit: sorted tensors,
    safetensors header, sharded with an index when over the limit) comes
    back identical, file for file, after load -> save -- including the
    F32 router correction bias among BF16 weights and the side files."""
    src, out = tmp_path / "src", tmp_path / "out"
    make(src, arch, max_shard_size=shard, bias_std=0.5)
    net, ld = ck.load_model(str(src))
    out.mkdir()
    ck.save(str(out), net, "BF16", src_dir=str(src), max_shard_size=ld.shard_limit_for("BF16"),
            buffer_dtypes={n: ld.stored_dtypes[n] for n, t in net.named_tensors().items() if not t.requires_grad})
    a, b = files_of(src), files_of(out)
    assert sorted(a) == sorted(b)
    for n in a:
        assert a[n] == b[n], n
    if shard:
        assert ld.shard_limit is not None and st.INDEX_FILE in a
        assert sum(1 for n in a if n.startswith("model-0")) >= 2
    else:
        assert st.SINGLE_FILE in a and st.INDEX_FILE not in a


@pytest.mark.parametrize("arch", ["qwen3_moe", "deepseek_v3"])
def test_sharded_and_single_file_hold_the_same_tensors(tmp_path, arch):
    make(tmp_path / "one", arch, seed=3)
    make(tmp_path / "many", arch, seed=3, max_shard_size=40_000)  # > any one tensor
    a, b = ck.load(str(tmp_path / "one")), ck.load(str(tmp_path / "many"))
    assert list(a.tensors) == list(b.tensors)
    for n in a.tensors:
        assert torch.equal(a.tensors[n], b.tensors[n]), n
    with open(tmp_path / "many" / st.INDEX_FILE) as f:
        index = json.load(f)
    total = sum(t.numel() * (4 if n.endswith("e_score_correction_bias") else 2) for n, t in a.tensors.items())
    assert index["metadata"]["total_size"] == total
    assert set(index["weight_map"]) == set(a.tensors)
    # shards hold consecutive runs of the state-dict order (huggingface_hub's
    # greedy split; no tensor here is over the limit, which would get a shard of its own)
    order = [n for n, _, _ in tensor_specs(a.cfg)]
    files = [index["weight_map"][n] for n in order]
    assert files == sorted(files) and len(set(files)) >= 3


def test_hf_file_layout(tmp_path):
    """Inside a file: tensors by descending dtype alignment then name (the
    F32 bias first), header compact JSON with __metadata__ first, padded
    with spaces to 8 bytes; config.json with sorted keys."""
    make(tmp_path, "deepseek_v3", bias_std=0.1)
    raw = open(tmp_path / "model.safetensors", "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0
    head = raw[8:8 + n].decode()
    assert head.startswith('{"__metadata__":{"format":"pt"},')
    h = json.loads(head)
    h.pop("__metadata__")
    names = list(h)  # json keeps file order
    f32 = [x for x in names if h[x]["dtype"] == "F32"]
    assert f32 == sorted(x for x in names if x.endswith("e_score_correction_bias")) and names[:len(f32)] == f32
    assert names[len(f32):] == sorted(names[len(f32):])
    offs = [h[x]["data_offsets"] for x in names]
    assert offs[0][0] == 0 and all(offs[i][1] == offs[i + 1][0] for i in range(len(offs) - 1))
    cfg_text = open(tmp_path / "config.json").read()
    assert cfg_text == json.dumps(json.loads(cfg_text), indent=2, sort_keys=True) + "\n"


def test_tensor_names_are_hf_names():
    """The names and shapes transformers' modules give (spot checks per family)."""
    q = {n: s for n, s, _ in tensor_specs(parse_config(randinit.tiny_config("qwen3")))}
    assert q["model.layers.1.self_attn.q_norm.weight"] == (16,)
    assert q["model.layers.0.self_attn.k_proj.weight"] == (2 * 16, 64)
    assert "lm_head.weight" not in q  # tied
    m = {n: s for n, s, _ in tensor_specs(parse_config(randinit.tiny_config("qwen3_moe")))}
    assert m["model.layers.0.mlp.gate.weight"] == (8, 64)
    assert m["model.layers.1.mlp.experts.7.down_proj.weight"] == (64, 32)
    assert m["lm_head.weight"] == (256, 64)
    d = {n: s for n, s, _ in tensor_specs(parse_config(randinit.tiny_config("deepseek_v3")))}
    assert d["model.layers.0.mlp.gate_proj.weight"] == (128, 64)  # first_k_dense_replace 1
    assert "model.layers.0.mlp.gate.weight" not in d
    assert d["model.layers.1.self_attn.kv_a_proj_with_mqa.weight"] == (32 + 8, 64)
    assert d["model.layers.1.self_attn.kv_b_proj.weight"] == (4 * (16 + 16), 32)
    assert d["model.layers.1.self_attn.q_b_proj.weight"] == (4 * 24, 32)
    assert d["model.layers.2.mlp.gate.e_score_correction_bias"] == (8,)
    assert d["model.layers.2.mlp.shared_experts.up_proj.weight"] == (32, 64)
    nq = {n for n, _, _ in tensor_specs(parse_config(randinit.tiny_config("deepseek_v3", q_lora_rank=None)))}
    assert "model.layers.0.self_attn.q_proj.weight" in nq and not any("q_a_proj" in n for n in nq)


def _rewrite(d, drop=None, reshape=None, add=None):
    ts, md = st.load_file(os.path.join(d, "model.safetensors"))
    if drop:
        del ts[drop]
    if reshape:
        ts[reshape] = ts[reshape][:-1]
    if add:
        ts[add] = torch.zeros(3, dtype=torch.bfloat16)
    st.save_file(os.path.join(d, "model.safetensors"), ts, metadata=md, hf_order=True)


@pytest.mark.parametrize("case", ["missing", "shape", "extra"])
def test_bad_tensor_is_refused_naming_file_and_tensor(tmp_path, case):
    make(tmp_path, "qwen3_moe")
    name = "model.layers.1.mlp.experts.3.up_proj.weight"
    _rewrite(tmp_path, drop=name if case == "missing" else None, reshape=name if case == "shape" else None,
             add="model.layers.0.mlp.bogus.weight" if case == "extra" else None)
    with pytest.raises(ck.CheckpointError) as e:
        ck.load(str(tmp_path))
    msg = str(e.value)
    assert str(tmp_path / "model.safetensors") in msg
    assert (name if case != "extra" else "model.layers.0.mlp.bogus.weight") in msg
    assert {"missing": "missing", "shape": "config.json implies [32, 64]", "extra": "not part of"}[case] in msg


def test_shard_problems_are_refused(tmp_path):
    make(tmp_path, "qwen3", max_shard_size=30_000)
    idx = tmp_path / st.INDEX_FILE
    index = json.loads(idx.read_text())
    victim = sorted(set(index["weight_map"].values()))[1]
    os.rename(tmp_path / victim, tmp_path / "moved")
    with pytest.raises(ck.CheckpointError, match=f"names {victim}, which is missing"):
        ck.load(str(tmp_path))
    os.rename(tmp_path / "moved", tmp_path / victim)
    name = next(n for n, f in index["weight_map"].items() if f == victim)
    index["weight_map"][name] = sorted(set(index["weight_map"].values()))[0]
    idx.write_text(json.dumps(index))
    with pytest.raises(ck.CheckpointError) as e:
        ck.load(str(tmp_path))
    assert name in str(e.value) and victim in str(e.value)


def test_unknown_architecture_and_bad_config_are_refused(tmp_path):
    make(tmp_path, "llama")
    cfg = json.loads((tmp_path / "config.json").read_text())
    for change, want in [({"model_type": "mistral"}, "model_type 'mistral' is not one of"),
                         ({"architectures": ["LlamaForSequenceClassification"]}, "architectures"),
                         ({"hidden_act": "gelu"}, "hidden_act"),
                         ({"attention_bias": True}, "attention_bias"),
                         ({"rope_scaling": {"rope_type": "longrope", "factor": 2.0}}, "rope_type"),
                         ({"num_key_value_heads": 3}, "num_key_value_heads")]:
        (tmp_path / "config.json").write_text(json.dumps({**cfg, **change}))
        with pytest.raises(ck.CheckpointError) as e:
            ck.load(str(tmp_path))
        assert str(tmp_path / "config.json") in str(e.value) and want in str(e.value), (change, str(e.value))


def test_tokenizer_must_fit_the_embedding(tmp_path):
    make(tmp_path, "qwen3")
    tok = json.loads((tmp_path / "tokenizer.json").read_text())
    tok["added_tokens"].append({"id": 256, "content": "<extra>"})
    (tmp_path / "tokenizer.json").write_text(json.dumps(tok))
    with pytest.raises(ck.CheckpointError) as e:
        ck.load(str(tmp_path))
    assert "tokenizer.json: token id 256" in str(e.value) and "model.embed_tokens.weight" in str(e.value)


def test_tied_lm_head_must_equal_the_embedding(tmp_path):
    make(tmp_path, "qwen3")  # tie_word_embeddings
    ts, md = st.load_file(str(tmp_path / "model.safetensors"))
    ts["lm_head.weight"] = ts["model.embed_tokens.weight"].clone()
    st.save_file(str(tmp_path / "model.safetensors"), ts, metadata=md, hf_order=True)
    ck.load(str(tmp_path))  # equal: accepted (HF ignores it)
    ts["lm_head.weight"] = ts["lm_head.weight"] * 2
    st.save_file(str(tmp_path / "model.safetensors"), ts, metadata=md, hf_order=True)
    with pytest.raises(ck.CheckpointError, match="differs from 'model.embed_tokens.weight'"):
        ck.load(str(tmp_path))


def test_rope_parameters_of_transformers_v5_read_like_legacy_fields():
    """config.json from transformers v5 (rope_parameters) and from v4
    (rope_theta + rope_scaling with "type") mean the same rope."""
    legacy = randinit.tiny_config("deepseek_v3")
    v5 = dict(legacy)
    scaling = dict(v5.pop("rope_scaling"))
    scaling["rope_type"] = scaling.pop("type")
    v5["rope_parameters"] = {**scaling, "rope_theta": v5.pop("rope_theta")}
    a, b = parse_config(legacy), parse_config(v5)
    assert a.rope == b.rope and a.rope.rope_type == "yarn" and a.rope.theta == 10000.0
    with pytest.raises(ConfigError, match="vocab_size: missing"):
        parse_config({k: v for k, v in legacy.items() if k != "vocab_size"})


def test_worker_refuses_a_bad_checkpoint_and_keeps_its_state(tmp_path):
    """Init with a broken checkpoint answers bad_field model.path naming the
    file and tensor; a worker that was serving keeps its model."""
    good, broken = tmp_path / "good", tmp_path / "broken"
    make(good, "qwen3")
    make(broken, "qwen3")
    _rewrite(broken, drop="model.layers.1.self_attn.k_norm.weight")
    w = Worker()
    assert w.handle(hf_init(tmp_path / "out", good))["type"] == "Ready"
    before = w.policy
    r = w.handle(hf_init(tmp_path / "out", broken, rid=2))
    assert (r["type"], r["code"], r["field"]) == ("Error", "bad_field", "model.path")
    assert "model.layers.1.self_attn.k_norm.weight" in r["message"] and "model.safetensors" in r["message"]
    assert w.policy is before
    cfg = json.loads((broken / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps({**cfg, "model_type": "gpt2"}))
    r = Worker().handle(hf_init(tmp_path / "out", broken))
    assert r["type"] == "Error" and r["field"] == "model.path" and "config.json" in r["message"] and "gpt2" in r["message"]
    r = Worker().handle({**hf_init(tmp_path / "out", good), "model": {"kind": "hf", "path": str(good), "config": {}}})
    assert r["type"] == "Error" and r["field"] == "model.config"


def test_shard_plan_is_huggingface_hubs_greedy_split():
    """A tensor over the limit gets a shard of its own at once; the others
    fill shards in order until the next would pass the limit."""
    plan = st.shard_plan([("a", 10), ("b", 50), ("c", 10), ("d", 10), ("e", 5)], 25)
    assert plan == [["b"], ["a", "c"], ["d", "e"]]
    assert st.shard_plan([("a", 10)], 25) == [["a"]]
