"""Issue 29 acceptance: publishing real Hugging Face checkpoints — delta,
FP8 and MXFP8 — round-trips through this package's worker extension bit for
bit, and the published config.json carries the quantization_config vLLM
reads.

For qwen3, qwen3_moe, llama and deepseek_v3 (`asyncrl model init --preset
tiny`, vocabulary 512; the two MoE models sharded): version 0 is the init,
version 1 a copy with a training step's worth of tensors changed in place
(attention, MLA and expert projections, router gates, a norm, embedding,
lm_head, DeepSeek's correction bias), the shards kept. Everything Go writes
is made by the asyncrl binary (conftest.py's asyncrl_bin): `weights diff`
and `weights quantize`, the publisher's own code (weights/delta,
weights/quantdir). Everything applied goes through WorkerExtension, the
class vLLM loads with --worker-extension-cls, onto a torch model whose
state_dict names are the checkpoint's HF names (helpers.TinyModel, whose
load_weights copies by name like vLLM's model.load_weights).

What vLLM does with these files is taken from its source (our own code
restates the rules; nothing is copied):

* which modules vLLM quantises — the LinearBase layers a model builds with
  the checkpoint's quant_config: vllm-project/vllm
  vllm/model_executor/models/qwen3_moe.py at
  002456df36fc7a63ca4463f335a49d05634ab2ab (qkv_proj/gate_up_proj stacked
  from q/k/v and gate/up, experts as FusedMoE, the router `gate` built with
  quant_config=None) and vllm/model_executor/models/deepseek_v2.py at
  002d6073aa034d4f5545d45021b0e56d1f3c3593 (q_a/q_b/kv_a_proj_with_mqa/
  kv_b/o projections with quant_config, fused_qkv_a_proj = q_a_proj +
  kv_a_proj_with_mqa, the router a GateLinear without one, embed_tokens a
  VocabParallelEmbedding, lm_head a ParallelLMHead);
* FP8: vllm/model_executor/layers/quantization/fp8.py at
  1436674bcb3f46f4c960d09334cf7dd1534943ca, Fp8Config.from_config (keys
  quant_method, activation_scheme, ignored_layers falling back to
  modules_to_not_convert, weight_block_size) and Fp8LinearMethod.create_weights
  (float8_e4m3fn weight, float32 weight_scale_inv [ceil(N/bn), ceil(K/bk)]);
  which layers ignored_layers skips: is_layer_skipped in
  vllm/model_executor/layers/quantization/utils/quant_utils.py at
  01693a61cbed06543efef7373f6774afb961f244;
* MXFP8: vllm/model_executor/layers/quantization/modelopt.py at
  00155cdecca722d98e34234c3d172725b7720b7d — _extract_modelopt_quant_algo,
  ModelOptQuantConfigBase.from_config (config.json's flat form reads
  quant_algo and "ignore"), is_layer_excluded (exact with fused shards,
  substring, fnmatch), ModelOptMxFp8LinearMethod.create_weights (float8_e4m3fn
  weight, weight_scale [N, K // 32] of MXFP8_SCALE_DTYPE, K % 32 == 0);
  MXFP8_SCALE_DTYPE = torch.uint8 in
  vllm/model_executor/layers/quantization/utils/mxfp8_utils.py at
  00134422a11df1b8427b29a36bdf22b697626b32, and the loaders copy with
  Tensor.copy_ (vllm/model_executor/parameter.py at
  0045689bdb239a1c53951f3847b9475098f36ef7), a value cast — so the scale
  must arrive as uint8 bytes, which is why Go writes it U8.

torch here is Debian's 1.13, which has no float8_e4m3fn: the fp8_torch
fixture stands uint8 in for it (same bytes, one per element), which is what
the extension's hand-off would view them as; under torch >= 2.1 the real
dtype is used and nothing is patched.
"""

import fnmatch
import json
import math
import os
import re
import shutil
import subprocess
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from asyncrl_vllm import WorkerExtension, quant
from asyncrl_vllm import delta as d
from asyncrl_vllm import safetensors_io as sio
from helpers import FakeModelRunner, TinyModel, bytes_of, perturb

ARCHS = ["qwen3", "qwen3_moe", "llama", "deepseek_v3"]
MOE = {"qwen3_moe", "deepseek_v3"}
SCHEMES = ["fp8", "mxfp8"]
VOCAB = 512
SHARD_BYTES = {"qwen3_moe": 120_000, "deepseek_v3": 160_000}  # several shards

# What a training step changed between version 0 and 1: (tensor name
# pattern, fraction of its elements). The rest stays byte-identical, so
# the delta must carry exactly these.
CHANGES = [
    (r"model\.embed_tokens\.weight", 0.01),
    (r"lm_head\.weight", 0.01),
    (r"model\.layers\.0\.self_attn\.(q|q_b)_proj\.weight", 0.05),
    (r"model\.layers\.\d+\.self_attn\.(q_a_proj|kv_a_proj_with_mqa|kv_b_proj)\.weight", 0.05),  # MLA
    (r"model\.layers\.\d+\.mlp\.experts\.3\.(gate|down)_proj\.weight", 0.05),
    (r"model\.layers\.\d+\.mlp\.shared_experts\.up_proj\.weight", 0.05),
    (r"model\.layers\.\d+\.mlp\.gate\.weight", 0.2),  # router
    (r"model\.layers\.\d+\.mlp\.gate\.e_score_correction_bias", 1.0),
    (r"model\.layers\.1\.input_layernorm\.weight", 0.1),
]

# The checkpoint tensors of the LinearBase modules vLLM builds with the
# checkpoint's quant_config (module doc): attention and MLA projections,
# dense and shared-expert MLPs, routed experts. Not the router gate, the
# embedding, lm_head, norms or biases.
VLLM_QUANTISED = re.compile(
    r"model\.layers\.\d+\.("
    r"self_attn\.(q|k|v|o|q_a|q_b|kv_b)_proj"
    r"|self_attn\.kv_a_proj_with_mqa"
    r"|mlp\.(gate|up|down)_proj"
    r"|mlp\.shared_experts\.(gate|up|down)_proj"
    r"|mlp\.experts\.\d+\.(gate|up|down)_proj"
    r")\.weight")

# vLLM's fused modules and the checkpoint shards they load (packed_modules_mapping).
FUSED = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"],
         "fused_qkv_a_proj": ["q_a_proj", "kv_a_proj_with_mqa"]}


def vllm_module(name):
    """The vLLM module prefix a quantised checkpoint tensor loads into."""
    for pat, repl in ((r"(.*)\.self_attn\.(q|k|v)_proj\.weight", r"\1.self_attn.qkv_proj"),
                      (r"(.*)\.self_attn\.(q_a_proj|kv_a_proj_with_mqa)\.weight", r"\1.self_attn.fused_qkv_a_proj"),
                      (r"(.*\.mlp)\.experts\.\d+\.\w+\.weight", r"\1.experts"),
                      (r"(.*\.mlp(\.shared_experts)?)\.(gate|up)_proj\.weight", r"\1.gate_up_proj")):
        if re.fullmatch(pat, name):
            return re.sub(pat, repl, name)
    return name[: -len(".weight")]


def vllm_is_layer_skipped(prefix, ignored):
    """quant_utils.is_layer_skipped (exact match; fused shards must agree)."""
    proj = prefix.split(".")[-1]
    if proj in FUSED:
        states = {prefix.replace(proj, shard) in ignored for shard in FUSED[proj]}
        assert len(states) == 1, f"vLLM refuses {prefix}: some but not all shards are quantised"
        return states.pop()
    if "experts" in prefix:
        return any(prefix in layer for layer in ignored if "experts" in layer)
    return prefix in ignored


def vllm_fp8_config(qc):
    """What Fp8Config.from_config reads, and its __init__ checks."""
    quant_method = qc["quant_method"]  # get_from_keys: required
    activation_scheme = qc["activation_scheme"]  # required
    ignored = qc.get("ignored_layers") or qc.get("modules_to_not_convert") or []
    block = qc.get("weight_block_size")
    serialized = "fp8" in quant_method
    assert activation_scheme in ("static", "dynamic")
    if block is not None:
        assert serialized and len(block) == 2 and activation_scheme == "dynamic"
    return SimpleNamespace(serialized=serialized, block=block, skipped=lambda p: vllm_is_layer_skipped(p, ignored))


def vllm_modelopt_mxfp8_config(qc):
    """What vLLM reads from a ModelOpt config.json quantization_config:
    _extract_modelopt_quant_algo picks modelopt_mxfp8, then
    ModelOptQuantConfigBase.from_config's flat branch and is_layer_excluded."""
    assert str(qc.get("quant_method", "")).lower().startswith("modelopt")
    if "quantization" in qc:  # hf_quant_config.json's nested form
        inner = qc["quantization"]
        algo, exclude = inner.get("quant_algo"), inner.get("exclude_modules", [])
        assert "kv_cache_quant_algo" in inner and "exclude_modules" in inner
    else:
        algo, exclude = qc.get("quant_algo"), qc.get("ignore", [])
    algo = str(algo or "").upper()
    assert "MXFP8" in algo and algo in ("FP8", "FP8_PER_CHANNEL_PER_TOKEN", "FP8_PB_WO", "NVFP4", "W4A16_NVFP4", "MXFP8", "MIXED_PRECISION")
    assert isinstance(exclude, list)

    def excluded(prefix):
        if not exclude:
            return False
        if vllm_is_layer_skipped(prefix, exclude):
            return True
        if any(e != prefix and e in prefix for e in exclude):
            return True
        return any(fnmatch.fnmatch(prefix, e) for e in exclude)

    return SimpleNamespace(algo=algo, skipped=excluded)


# --- building the versions -------------------------------------------------

def run(bin, *args):
    p = subprocess.run([bin, *args, "--log-level", "warn"], capture_output=True, text=True)
    assert p.returncode == 0, f"asyncrl {' '.join(args)}:\n{p.stderr[-3000:]}"
    return p.stdout


def go_diff(bin, base, new, root, version):
    out = run(bin, "weights", "diff", "--base", base, "--new", new, "--out", root, "--version", str(version), "--json")
    return json.loads(out)


def tensors(dir):
    """name -> (safetensors dtype, shape, bytes) of a checkpoint directory."""
    ck = sio.open_checkpoint(dir)
    return {n: (ck.info(n).dtype, tuple(ck.info(n).shape), ck.read(n).tobytes()) for n in ck.names()}


def rewrite(src, dst, new_bytes):
    """dst: a copy of src with some tensors' bytes replaced, in the same
    shards, order and metadata (the index stays valid: sizes are kept)."""
    shutil.copytree(src, dst)
    ck = sio.open_checkpoint(src)
    for shard, f in ck.files.items():
        if not any(n in new_bytes for n in f.tensors):
            continue
        names = sorted(f.tensors, key=lambda n: f.info(n).begin)
        sio.write_file(os.path.join(dst, shard),
                       [(n, f.info(n).dtype, f.info(n).shape, new_bytes.get(n) or f.read(n).tobytes()) for n in names],
                       f.metadata)


@pytest.fixture(scope="module", params=ARCHS)
def hf(request, asyncrl_bin, tmp_path_factory):
    arch = request.param
    tmp = tmp_path_factory.mktemp(arch)
    v0, v1 = str(tmp / "v0"), str(tmp / "v1")
    args = ["model", "init", "--arch", arch, "--preset", "tiny", "--vocab", str(VOCAB), "--seed", "3", "--out", v0]
    if arch in SHARD_BYTES:
        args += ["--shard-size", str(SHARD_BYTES[arch])]
    run(asyncrl_bin, *args)
    base = tensors(v0)
    changed = {}
    for i, name in enumerate(sorted(base)):
        frac = next((f for pat, f in CHANGES if re.fullmatch(pat, name)), None)
        if frac is None:
            continue
        dt, shape, b = base[name]
        t = sio.to_torch(np.frombuffer(b, np.uint8).copy(), dt, shape)
        changed[name] = bytes_of(perturb(t, 1000 + i, frac))
        assert changed[name] != b, name
    rewrite(v0, v1, changed)
    return SimpleNamespace(arch=arch, tmp=tmp, v0=v0, v1=v1, base=base, new=tensors(v1), changed=set(changed))


@pytest.fixture(scope="module", params=SCHEMES)
def q(request, hf, asyncrl_bin):
    """Both versions quantised as the publisher quantises them (quantdir)."""
    s = request.param
    q0, q1 = str(hf.tmp / f"{s}-0"), str(hf.tmp / f"{s}-1")
    for src, dst in ((hf.v0, q0), (hf.v1, q1)):
        run(asyncrl_bin, "weights", "quantize", "--scheme", s, src, dst)
    return SimpleNamespace(scheme=s, q0=q0, q1=q1, t0=tensors(q0), t1=tensors(q1),
                           suffix="_scale_inv" if s == "fp8" else "_scale")


@pytest.fixture
def fp8_torch(monkeypatch):
    if getattr(torch, "float8_e4m3fn", None) is None:
        monkeypatch.setattr(torch, "float8_e4m3fn", torch.uint8, raising=False)
    return torch.float8_e4m3fn


class RecordingModel(TinyModel):
    """TinyModel that also records the dtype of every tensor the extension
    hands to load_weights (what vLLM's loaders would copy from)."""

    def load_weights(self, weights):
        self.__dict__.setdefault("handed", {})

        def seen():
            for n, t in weights:
                self.handed[n] = t.dtype
                yield n, t

        super().load_weights(seen())


def worker(ts):
    w = WorkerExtension()
    w.model_runner = FakeModelRunner(RecordingModel({n: (sio.torch_dtype(dt), shape) for n, (dt, shape, _) in ts.items()}))
    return w


def params(w):
    return {n: bytes_of(t) for n, t in w.model_runner.model.state_dict().items()}


def raw(ts):
    return {n: b for n, (_, _, b) in ts.items()}


def bf16_values(b, shape):
    return (np.frombuffer(b, "<u2").astype(np.uint32) << 16).view(np.float32).reshape(shape)


# --- tests -------------------------------------------------------------------

def test_bf16_delta_round_trip(hf, asyncrl_bin, tmp_path):
    """Go's delta of the HF checkpoint, applied by the extension: the live
    parameters end bit-identical to version 1, and only the changed tensors
    travel and are handed to load_weights."""
    names = hf.changed
    assert any("experts." in n for n in names) == (hf.arch in MOE)
    assert any(n.endswith("mlp.gate.weight") for n in names) == (hf.arch in MOE)
    assert any("kv_a_proj_with_mqa" in n for n in names) == (hf.arch == "deepseek_v3")
    if hf.arch in SHARD_BYTES:
        assert len(sio.open_checkpoint(hf.v1).files) > 1

    root = str(tmp_path / "sync")
    summary = go_diff(asyncrl_bin, hf.v0, hf.v1, root, 1)
    assert summary["version"] == 1
    m = d.read_manifest_dir(os.path.join(root, d.delta_dir_name(1)), 1)
    assert {e.name for e in m.tensors} == names
    assert {e.dtype for e in m.tensors} == {"BF16"}

    w = worker(hf.base)
    assert w.asyncrl_load_checkpoint(hf.v0, 0) == {"version": 0, "tensors": len(hf.base)}
    assert params(w) == raw(hf.base)
    w.model_runner.model.loaded.clear()
    assert w.asyncrl_apply_delta(root, 1) == {"version": 1, "patched": len(names), "skipped": []}
    assert set(w.model_runner.model.loaded) == names
    assert params(w) == raw(hf.new)
    assert w.asyncrl_loaded_version() == 1


def test_quantised_tensors_are_the_ones_vllm_quantises(hf, q):
    """Exactly vLLM's quantised projections become F8_E4M3 codes plus a
    scale of the dtype and shape vLLM's create_weights registers, in the
    weight's own shard; every other tensor (router gates, embeddings, norms,
    lm_head, biases) is the BF16 original byte for byte; and the codes serve
    the BF16 masters within E4M3's bound."""
    want = {n for n in hf.base if VLLM_QUANTISED.fullmatch(n)}
    assert any(".experts." in n for n in want) == (hf.arch in MOE)
    assert any("kv_a_proj_with_mqa" in n for n in want) == (hf.arch == "deepseek_v3")
    assert {n for n, (dt, _, _) in q.t0.items() if dt == "F8_E4M3"} == want
    assert set(q.t0) == set(hf.base) | {n + q.suffix for n in want}
    for n in set(hf.base) - want:
        assert q.t0[n] == hf.base[n], f"{n} changed; vLLM serves it unquantised"
        assert q.t0[n][0] == "BF16"

    ck, ck0 = sio.open_checkpoint(q.q0), sio.open_checkpoint(hf.v0)
    assert set(ck.files) == set(ck0.files), "the shards keep their names"
    assert all(f.metadata.get(quant.QUANTIZATION_KEY) == q.scheme for f in ck.files.values())
    served = {}
    for f in ck.files.values():
        served.update(quant.dequantize_file(f))
    assert set(served) == want

    for n in want:
        assert ck.where[n] == ck.where[n + q.suffix] == ck0.where[n]
        _, (rows, cols), _ = q.t0[n]
        assert q.t0[n][1] == hf.base[n][1]
        sdt, sshape, sbytes = q.t0[n + q.suffix]
        if q.scheme == "fp8":
            assert (sdt, sshape) == ("F32", (math.ceil(rows / 128), math.ceil(cols / 128)))
            unit = quant.dequantize_fp8_block(np.full((rows, cols), 0x38, np.uint8), np.frombuffer(sbytes, "<f4").reshape(sshape))
        else:
            assert cols % 32 == 0, f"{n}: vLLM's MXFP8 needs K % 32 == 0"
            assert (sdt, sshape) == ("U8", (rows, cols // 32))
            unit = quant.dequantize_mxfp8(np.full((rows, cols), 0x38, np.uint8), np.frombuffer(sbytes, np.uint8).reshape(sshape))
        master = bf16_values(hf.base[n][2], (rows, cols))
        # |served - master| <= 2^-4 |master| + 2^-10 s (weights/quant doc), with float32 slack
        err = np.abs(served[n] - master) - (np.abs(master) / 16 + unit * 2.0**-9)
        assert err.max() <= 0, f"{n}: served values off the masters by {err.max()} beyond E4M3's bound"


def test_quantised_checkpoint_loads_bit_for_bit(hf, q, fp8_torch):
    """The extension loads the published quantised version 0 (what a vLLM
    worker does for the base): every live tensor equals the bytes Go wrote,
    codes handed as float8_e4m3fn and scales as the dtype of vLLM's scale
    parameter (float32; uint8 for MXFP8, so copy_ keeps the exponent bytes)."""
    w = worker(q.t0)
    assert w.asyncrl_load_checkpoint(q.q0, 0) == {"version": 0, "tensors": len(q.t0)}
    assert params(w) == raw(q.t0)
    handed = w.model_runner.model.handed
    assert set(handed) == set(q.t0)
    scale_dtype = torch.float32 if q.scheme == "fp8" else torch.uint8
    for n, (dt, _, _) in q.t0.items():
        if dt == "F8_E4M3":
            assert handed[n] == fp8_torch and handed[n + q.suffix] == scale_dtype
        elif not n.endswith(q.suffix):
            assert handed[n] == torch.bfloat16


def test_delta_on_quantised_base_round_trips(hf, q, fp8_torch, asyncrl_bin, tmp_path):
    """The publisher's quantised chain (cluster/weightsync: base quantised,
    each version requantised, the delta taken between quantised versions):
    the extension holding quantised version 0 applies Go's delta and ends
    bit-identical to quantised version 1."""
    assert set(q.t0) == set(q.t1)
    differ = {n for n in q.t0 if q.t0[n][2] != q.t1[n][2]}
    source = {n[: -len(q.suffix)] if n.endswith(q.suffix) else n for n in differ}
    assert source == hf.changed, "a quantised tensor changes exactly when its BF16 master did"

    root = str(tmp_path / "sync")
    go_diff(asyncrl_bin, q.q0, q.q1, root, 1)
    m = d.read_manifest_dir(os.path.join(root, d.delta_dir_name(1)), 1)
    assert {e.name for e in m.tensors} == differ
    assert {"F8_E4M3", "BF16", "F32" if q.scheme == "fp8" else "U8"} <= {e.dtype for e in m.tensors}

    w = worker(q.t0)
    w.asyncrl_load_checkpoint(q.q0, 0)
    w.model_runner.model.loaded.clear()
    assert w.asyncrl_apply_delta(root, 1) == {"version": 1, "patched": len(differ), "skipped": []}
    assert set(w.model_runner.model.loaded) == differ
    assert params(w) == raw(q.t1)
    assert w.asyncrl_loaded_version() == 1


def test_config_json_is_what_vllm_reads(hf, q):
    """config.json keeps every source key and adds the quantization_config
    vLLM parses into the right method, skipping exactly the unquantised
    modules (router gates, lm_head) and quantising every projection."""
    cfg0 = json.load(open(os.path.join(hf.v0, "config.json")))
    cfg = json.load(open(os.path.join(q.q0, "config.json")))
    assert "quantization_config" not in cfg0
    qc = cfg.pop("quantization_config")
    assert cfg == cfg0
    if q.scheme == "fp8":
        r = vllm_fp8_config(qc)
        assert r.serialized and r.block == [128, 128]
    else:
        r = vllm_modelopt_mxfp8_config(qc)
        assert r.algo == "MXFP8"

    modules = {vllm_module(n) for n in hf.base if VLLM_QUANTISED.fullmatch(n)}
    for m in modules:
        assert not r.skipped(m), f"vLLM would not quantise {m}, but its weights are FP8"
    routers = {n[: -len(".weight")] for n in hf.base if n.endswith("mlp.gate.weight")}
    assert bool(routers) == (hf.arch in MOE)
    for m in routers | {"lm_head"}:
        assert r.skipped(m), f"vLLM would quantise {m}, whose weight is BF16"


def test_reload_units_hold_whole_vllm_layers(hf, q):
    """With vLLM's layerwise reload a delta resends whole reload units
    (asyncrl_vllm.reload.reload_unit): every checkpoint tensor that loads
    into one vLLM module (fused qkv, gate_up, fused_qkv_a_proj, all routed
    experts of a layer, and each one's scales) must fall in one unit, or the
    hooks would process that module half-loaded."""
    from asyncrl_vllm.reload import reload_unit

    for names in (hf.base, q.t0):
        units = {}
        for name in names:
            leaf = name.rsplit(".", 1)[1]
            module = vllm_module(name[: -len(leaf)] + "weight") if leaf != "weight" else vllm_module(name)
            units.setdefault(module, set()).add(reload_unit(name))
        split = {m: u for m, u in units.items() if len(u) != 1}
        assert split == {}, f"{hf.arch}: vLLM modules spread over several reload units: {split}"
        assert any(m.endswith(".experts") for m in units) == (hf.arch in MOE)
