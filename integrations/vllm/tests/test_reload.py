"""The extension reloads as vLLM does: through the layerwise reload hooks
where vLLM has them, plain load_weights only for a model with nothing to
re-process, and a refusal naming the release otherwise (reload.py).

The fakes (fake_vllm.py) derive serving tensors from checkpoint tensors with
real repacks, so every comparison below is against a model freshly loaded
from the same version's checkpoint, the way vLLM loads at start."""

import pytest
import torch

import fake_vllm as fv
from asyncrl_vllm import WorkerExtension
from asyncrl_vllm.reload import (MIN_RELOAD_HOOKS_RELEASE, Hooks, ReloadUnsupportedError, Reloader,
                                 expand_to_units, find_hooks, plain_reload_blockers, reload_unit)
from asyncrl_vllm.state import StateError, WeightState
from helpers import FakeModelRunner, TinyModel, encode_delta, perturb, raw, write_ckpt

KINDS = ["dense", "fp8", "mla", "moe", "full"]


def versions(kind, n=3):
    """Checkpoint tensors of versions 0..n. Each delta changes a few tensors
    only (a q_proj, one expert's gate, a scale, the embedding), so most of a
    fused layer is unchanged: the case layerwise reload gets wrong when only
    the changed tensors are sent."""
    g = torch.Generator().manual_seed(7)
    specs = fv.FakeModel(kind).checkpoint_specs()
    v0 = {}
    for name, shape in specs.items():
        t = torch.rand(shape, generator=g) + 0.5 if name.endswith("weight_scale") else torch.randn(shape, generator=g)
        v0[name] = t
    vs = [v0]
    rotate = [n for n in specs if ".q_proj." in n or "experts.1.gate" in n or n.endswith("v_proj.weight_scale")
              or "embed" in n or "kv_b_proj" in n]
    for k in range(1, n + 1):
        nxt = dict(vs[-1])
        for i, name in enumerate(rotate):
            always = name.startswith("model.embed") or "kv_b_proj" in name or "experts.1.gate" in name or name.endswith("q_proj.weight")
            if always or (i + k) % 2 == 0:
                nxt[name] = perturb(nxt[name], 100 * k + i, frac=0.5)
        vs.append(nxt)
    return vs


@pytest.fixture
def chain(tmp_path, request):
    kind = request.param
    vs = versions(kind)
    ck = write_ckpt(str(tmp_path / "v0"), vs[0])
    root = str(tmp_path / "sync")
    for k in range(1, len(vs)):
        encode_delta(raw(vs[k - 1]), raw(vs[k]), k, root)
    return kind, ck, root, vs


def worker(kind, trace, served=None):
    """A worker whose model vLLM loaded at start from `served` (processed)."""
    w = WorkerExtension()
    m = fv.fresh(kind, served) if served is not None else fv.FakeModel(kind)
    m.trace = trace
    w.model_runner = FakeModelRunner(m)
    w.model_config = fv.model_config(kind)
    w.vllm_config = object()
    return w


def assert_serves(w, tensors):
    got = w.model_runner.model.serving_state()
    want = fv.fresh(w.model_runner.model.kind, tensors).serving_state()
    assert sorted(got) == sorted(want)
    bad = [n for n in want if not torch.equal(got[n], want[n])]
    assert bad == [], f"serving tensors differ from a fresh load: {bad}"


def ptrs(w):
    m = w.model_runner.model
    return {n: t.data_ptr() for n, t in list(m.named_parameters()) + list(m.named_buffers())}


ONE_RELOAD = ["config+", "initialize", "load_weights", "finalize", "config-"]


@pytest.mark.parametrize("chain", KINDS, indirect=True)
def test_hooks_reload_equals_a_fresh_load(chain):
    kind, ck, root, vs = chain
    trace = []
    with fv.installed("new", trace):
        w = worker(kind, trace, served=vs[0])
        before = ptrs(w)
        assert w.asyncrl_load_checkpoint(ck, 0)["version"] == 0
        assert trace == ONE_RELOAD
        assert_serves(w, vs[0])
        for k in range(1, len(vs)):
            trace.clear()
            r = w.asyncrl_apply_delta(root, k)
            assert r["version"] == k and r["patched"] > 0
            assert trace == ONE_RELOAD, "initialize -> load_weights -> finalize, once, inside the vLLM config context"
            assert_serves(w, vs[k])
        # the kernel tensors were written in place: captured CUDA graphs still see them
        assert ptrs(w) == before


@pytest.mark.parametrize("chain", ["fp8", "full"], indirect=True)
def test_partial_delta_resends_its_whole_block(chain):
    kind, ck, root, vs = chain
    trace = []
    with fv.installed("new", trace):
        w = worker(kind, trace, served=vs[0])
        w.asyncrl_load_checkpoint(ck, 0)
        r = w.asyncrl_apply_delta(root, 1)
        block = [n for n in vs[0] if n.startswith("model.layers.0.")]
        changed_in_block = [n for n in block if not torch.equal(vs[0][n], vs[1][n])]
        assert 0 < len(changed_in_block) < len(block)
        assert r["resent"] == len(block) - len(changed_in_block)  # the unchanged rest of block 0
        assert_serves(w, vs[1])


@pytest.mark.parametrize("chain", ["fp8", "full"], indirect=True)
def test_sending_only_changed_tensors_through_the_hooks_corrupts(chain):
    """Why Reloader.resend exists: the hooks process a half-sent fused layer
    with the rest uninitialised (layerwise.py "Delayed processing")."""
    kind, ck, root, vs = chain
    trace = []
    with fv.installed("new", trace):
        w = worker(kind, trace, served=vs[0])
        hooks = find_hooks()
        r = Reloader("layerwise", w.model_runner.model, w.model_config, hooks)
        st = WeightState()
        st.load_checkpoint(ck, 0, r.load)
        st.apply_delta(root, 1, r.load)  # no resend
        qkv = w.model_runner.model.layers[0].qkv_proj.weight
        assert torch.isnan(qkv).any()


@pytest.mark.parametrize("chain", ["fp8", "mla", "moe", "full"], indirect=True)
def test_skipped_or_misordered_hooks_serve_wrong_weights(chain):
    """The fake catches what the extension must not do: plain load_weights
    on a processed model, or finalize before the load."""
    kind, ck, root, vs = chain
    skipped = fv.fresh(kind, vs[0])
    skipped.load_weights(list(vs[1].items()))
    want = fv.fresh(kind, vs[1]).serving_state()
    got = skipped.serving_state()
    assert any(not torch.equal(got[n], want[n]) for n in want)

    trace = []
    with fv.installed("new", trace):
        init, fin = find_hooks().initialize, find_hooks().finalize
        m = fv.fresh(kind, vs[0])
        init(m)
        fin(m, fv.model_config(kind))
        m.load_weights(list(vs[1].items()))
        got = m.serving_state()
        assert any(not torch.equal(got[n], want[n]) for n in want)


@pytest.mark.parametrize("chain", ["dense"], indirect=True)
def test_old_api_dense_model_uses_plain_load_weights(chain):
    kind, ck, root, vs = chain
    trace = []
    with fv.installed("old", trace):
        assert find_hooks() is None
        w = worker(kind, trace, served=vs[0])
        w.asyncrl_load_checkpoint(ck, 0)
        assert trace == ["load_weights"]
        for k in range(1, len(vs)):
            trace.clear()
            r = w.asyncrl_apply_delta(root, k)
            assert trace == ["load_weights"] and "resent" not in r  # only the changed tensors
            assert_serves(w, vs[k])


@pytest.mark.parametrize("chain,reason", [("fp8", "quantised"), ("mla", "MLA"), ("moe", "fused-MoE"), ("full", "quantised")],
                         indirect=["chain"])
def test_old_api_refuses_a_model_that_needs_reprocessing(chain, reason):
    kind, ck, root, vs = chain
    trace = []
    with fv.installed("old", trace):
        w = worker(kind, trace, served=vs[0])
        before = w.model_runner.model.serving_state()
        with pytest.raises(ReloadUnsupportedError, match=MIN_RELOAD_HOOKS_RELEASE) as e:
            w.asyncrl_load_checkpoint(ck, 0)
        assert reason in str(e.value) and "Nothing was loaded" in str(e.value)
        # vLLM started from ck: a delta would adopt it; refused the same way
        w.model_config.model = ck
        with pytest.raises(ReloadUnsupportedError, match=reason):
            w.asyncrl_apply_delta(root, 1)
        assert trace == []  # load_weights never called
        after = w.model_runner.model.serving_state()
        assert all(torch.equal(before[n], after[n]) for n in before)
        assert w.asyncrl_loaded_version() == -1


def test_model_config_quantization_alone_blocks_the_plain_path(tmp_path):
    w = WorkerExtension()
    w.model_runner = FakeModelRunner(TinyModel({"w": (torch.float32, (2, 2))}))
    w.model_config = fv.Config(quantization="mxfp4", hf_config=None)
    ck = write_ckpt(str(tmp_path / "ck"), {"w": torch.ones(2, 2)})
    with pytest.raises(ReloadUnsupportedError, match="quantization='mxfp4'"):
        w.asyncrl_load_checkpoint(ck, 0)
    assert w.model_runner.model.loaded == []
    w.model_config = fv.Config(quantization=None, hf_config=None)
    assert w.asyncrl_load_checkpoint(ck, 0) == {"version": 0, "tensors": 1}


def test_blockers_name_each_kind():
    assert plain_reload_blockers(fv.FakeModel("dense"), fv.model_config("dense")) == []
    full = "; ".join(plain_reload_blockers(fv.FakeModel("full"), fv.model_config("full")))
    for want in ("quantization='fp8'", "Fp8LinearMethod", "kv_lora_rank", "MLA attention layers",
                 "fused-MoE layers"):
        assert want in full


@pytest.mark.parametrize("chain", ["fp8"], indirect=True)
def test_refuses_while_a_native_weight_update_is_active(chain):
    kind, ck, root, vs = chain
    trace = []
    with fv.installed("new", trace):
        w = worker(kind, trace, served=vs[0])
        w._weight_update_active = True  # vLLM's Worker between start_ and finish_weight_update
        with pytest.raises(ReloadUnsupportedError, match="finish_weight_update"):
            w.asyncrl_load_checkpoint(ck, 0)
        assert trace == []
        w._weight_update_active = False
        w.asyncrl_load_checkpoint(ck, 0)
        assert_serves(w, vs[0])


@pytest.mark.parametrize("chain", ["full"], indirect=True)
def test_load_failure_inside_the_hooks_finalizes_and_marks_dirty(chain):
    kind, ck, root, vs = chain
    trace = []
    with fv.installed("new", trace):
        w = worker(kind, trace, served=vs[0])
        w.asyncrl_load_checkpoint(ck, 0)
        m = w.model_runner.model
        real = m.load_weights

        def failing(weights):
            it = iter(weights)
            real([next(it), next(it)])
            raise RuntimeError("CUDA out of memory")

        m.load_weights = failing
        trace.clear()
        with pytest.raises(StateError, match="half-updated"):
            w.asyncrl_apply_delta(root, 1)
        assert trace[-2:] == ["finalize", "config-"]  # the hooks were closed
        assert w.asyncrl_loaded_version() == -1
        with pytest.raises(StateError, match="asyncrl_load_checkpoint"):
            w.asyncrl_apply_delta(root, 1)
        m.load_weights = real
        w.asyncrl_load_checkpoint(ck, 0)
        w.asyncrl_apply_delta(root, 1)
        assert_serves(w, vs[1])


def test_reload_units():
    assert reload_unit("model.layers.12.self_attn.q_proj.weight") == "model.layers.12"
    assert reload_unit("model.layers.3.mlp.experts.17.down_proj.weight") == "model.layers.3"
    assert reload_unit("model.embed_tokens.weight") == "model.embed_tokens"
    assert reload_unit("lm_head.weight") == "lm_head"
    names = ["model.embed_tokens.weight", "model.layers.0.a.weight", "model.layers.0.b.weight",
             "model.layers.1.a.weight", "model.norm.weight"]
    assert expand_to_units(["model.layers.0.b.weight"], names) == ["model.layers.0.a.weight", "model.layers.0.b.weight"]
    assert expand_to_units(["model.norm.weight"], names) == ["model.norm.weight"]


def test_find_hooks_by_import_not_version():
    trace = []
    with fv.installed("old", trace):
        assert find_hooks() is None
    with fv.installed("new", trace):
        h = find_hooks()
        assert isinstance(h, Hooks) and h.initialize.__name__ == "initialize_layerwise_reload"
