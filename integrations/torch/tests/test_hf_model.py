"""The native forward passes: packing invariance, the KV-cache decode, the
architectural details each family depends on (a deliberately wrong detail
changes the logits), and the pieces checked against independent
formulations (RoPE frequencies, DeepSeek's softmax scale and
interleaved rotary lanes, causal GQA attention, grouped top-k)."""

import math

import numpy as np
import pytest
import torch

from asyncrl_worker.hf import checkpoint as ck
from asyncrl_worker.hf import randinit, rope
from asyncrl_worker.hf.config import parse_config
from asyncrl_worker.hf.model import CausalLM, _attend

from hfutil import ARCHS, MOE_ARCHS, make


def load(tmp_path, arch, **kw):
    make(tmp_path, arch, **kw)
    return ck.load_model(str(tmp_path))[0]


def rand_seqs(n, lo=3, hi=20, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (int(torch.randint(lo, hi, (1,), generator=g)),), generator=g) for _ in range(n)]


@pytest.mark.parametrize("arch", ARCHS)
def test_logits_do_not_depend_on_packing(tmp_path, arch):
    """A sequence's logits alone equal its logits packed with longer and
    shorter sequences (own causal attention, positions from 0)."""
    net = load(tmp_path, arch)
    seqs = rand_seqs(4, seed=1)
    pos = [torch.arange(1, len(s)) for s in seqs]
    with torch.no_grad():
        packed = net.logits_packed(seqs, pos)
        alone = torch.cat([net.logits_packed([s], [p]) for s, p in zip(seqs, pos)])
        # a sequence's prefix predicts the same as the whole sequence does
        pre = net.logits_packed([seqs[0][:3]], [torch.arange(1, 3)])
    assert packed.shape == alone.shape == (sum(len(s) - 1 for s in seqs), 256)
    assert float((packed - alone).abs().max()) < 1e-4
    assert float((pre - alone[:2]).abs().max()) < 1e-4
    assert float(alone.std()) > 0.1  # not degenerate


@pytest.mark.parametrize("arch", ARCHS)
def test_kv_cache_decode_equals_the_full_forward(tmp_path, arch):
    """Greedy decode with the KV cache (batch 3) picks, at every step, the
    argmax of a full forward pass over the sequence so far."""
    net = load(tmp_path, arch)
    prompts = torch.randint(0, 256, (3, 9), generator=torch.Generator().manual_seed(2))
    gen = net.generate_greedy(prompts, 6)
    with torch.no_grad():
        full = torch.cat([prompts, gen], 1)
        h, _ = net.forward_hidden(full)
        want = net.lm_logits(h)[:, 8:14].argmax(-1)
    assert torch.equal(gen, want)


def logits_of(tmp_path, arch, name, seed=0, **override):
    """Logits of fixed sequences on a checkpoint with the same weights but
    a config changed by override."""
    d = tmp_path / name
    make(d, arch, seed=seed, bias_std=0.3, **override)
    net = ck.load_model(str(d))[0]
    seqs = rand_seqs(2, lo=20, hi=30, seed=5)
    with torch.no_grad():
        return net.logits_packed(seqs, [torch.arange(1, len(s)) for s in seqs]), net


def differs(a, b):
    return float((a - b).abs().max()) > 1e-3


@pytest.mark.parametrize("arch", ARCHS)
def test_rope_base_matters(tmp_path, arch):
    base, _ = logits_of(tmp_path, arch, "a")
    theta = randinit.tiny_config(arch)["rope_theta"]
    other, _ = logits_of(tmp_path, arch, "b", rope_theta=theta * 3)
    assert differs(base, other)


def test_qk_norm_matters(tmp_path):
    """Dropping qwen3's per-head q/k RMSNorm changes the logits."""
    base, net = logits_of(tmp_path, "qwen3", "a")
    object.__setattr__(net.cfg, "qk_norm", False)
    seqs = rand_seqs(2, lo=20, hi=30, seed=5)
    with torch.no_grad():
        off = net.logits_packed(seqs, [torch.arange(1, len(s)) for s in seqs])
    assert differs(base, off)


def test_llama3_rope_scaling_matters(tmp_path):
    """With an original context short enough that positions 0..30 reach
    the scaled bands, dropping rope type llama3 changes the logits."""
    scaling = {**randinit.tiny_config("llama")["rope_scaling"], "original_max_position_embeddings": 64}
    base, _ = logits_of(tmp_path, "llama", "a", rope_scaling=scaling)
    plain, _ = logits_of(tmp_path, "llama", "b", rope_scaling=None)
    assert differs(base, plain)


def test_deepseek_router_bias_and_softmax_scale_matter(tmp_path):
    """The correction bias changes which experts run (not their weights),
    and yarn's mscale_all_dim changes the attention scale."""
    base, net = logits_of(tmp_path, "deepseek_v3", "a")
    seqs = rand_seqs(2, lo=20, hi=30, seed=5)
    pos = [torch.arange(1, len(s)) for s in seqs]
    with torch.no_grad():
        for name, b in net.named_tensors().items():
            if name.endswith("e_score_correction_bias"):
                b.zero_()
        nobias = net.logits_packed(seqs, pos)
    assert differs(base, nobias)
    cfg = randinit.tiny_config("deepseek_v3")
    noscale, net2 = logits_of(tmp_path, "deepseek_v3", "b",
                              rope_scaling={**cfg["rope_scaling"], "mscale_all_dim": 0.0})
    assert net2.scale != net.scale and differs(base, noscale)


@pytest.mark.parametrize("arch", MOE_ARCHS)
def test_norm_topk_prob_matters(tmp_path, arch):
    base, _ = logits_of(tmp_path, arch, "a")
    other, _ = logits_of(tmp_path, arch, "b", norm_topk_prob=False)
    assert differs(base, other)


def test_rope_frequencies_match_the_published_formulas():
    """inv_freq and the attention factor, recomputed in float64 from the
    formulas of the Llama 3.1 and YaRN papers as transformers / vLLM state
    them, agree with rope.inv_freq_and_scale to float32 precision."""
    d = 16
    base = [1 / (500000.0 ** (i / d)) for i in range(0, d, 2)]
    raw = randinit.tiny_config("llama")
    cfg = parse_config({**raw, "rope_scaling": {**raw["rope_scaling"], "original_max_position_embeddings": 64}})
    got, att = rope.inv_freq_and_scale(cfg.rope, d, 512)
    want = []
    for f in base:
        wl = 2 * math.pi / f
        if wl < 64 / 4:
            want.append(f)
        elif wl > 64 / 1:
            want.append(f / 8)
        else:
            s = (64 / wl - 1) / (4 - 1)
            want.append((1 - s) * f / 8 + s * f)
    assert att == 1.0 and np.allclose(got.numpy(), want, rtol=1e-6)
    assert len({round(w / f, 6) for w, f in zip(want, base)}) == 3  # all three bands occur
    # yarn (dim 8, theta 1e4, factor 4, orig 128, beta 32/1, mscale 1/1)
    raw = randinit.tiny_config("deepseek_v3")
    dcfg = parse_config({**raw, "rope_scaling": {**raw["rope_scaling"], "original_max_position_embeddings": 128}})
    got, att = rope.inv_freq_and_scale(dcfg.rope, 8, 512)
    dim, theta, fac, orig = 8, 10000.0, 4.0, 128

    def corr(r):
        return dim * math.log(orig / (r * 2 * math.pi)) / (2 * math.log(theta))

    lo, hi = max(math.floor(corr(32)), 0), min(math.ceil(corr(1)), dim - 1)
    want, ramps = [], []
    for i in range(dim // 2):
        ramp = min(max((i - lo) / ((hi - lo) or 0.001), 0.0), 1.0)
        ramps.append(ramp)
        pf = theta ** (2 * i / dim)
        want.append((1 / (fac * pf)) * ramp + (1 / pf) * (1 - ramp))
    assert ramps[0] == 0 and ramps[-1] == 1 and any(0 < r < 1 for r in ramps)  # all three regimes
    assert np.allclose(got.numpy(), want, rtol=1e-6) and att == 1.0  # mscale / mscale_all_dim = 1
    # DeepSeek-V3's own numbers: factor 40, mscale_all_dim 1, qk_head_dim 192
    ds = parse_config({**randinit.tiny_config("deepseek_v3"), "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                       "rope_scaling": {"type": "yarn", "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                                        "original_max_position_embeddings": 4096}})
    m = 0.1 * math.log(40) + 1
    assert math.isclose(ds.softmax_scale(), 192 ** -0.5 * m * m, rel_tol=1e-12)


def test_interleaved_rope_is_gptj_pairing():
    """DeepSeek's rope_interleave (transformers' de-interleave + rotate_half)
    gives the same q.k products as rotating lane pairs (2i, 2i+1) by angle
    pos * inv_freq[i] (vLLM's is_neox_style=False)."""
    g = torch.Generator().manual_seed(0)
    d, S = 8, 5
    q, k = torch.randn(S, d, generator=g), torch.randn(S, d, generator=g)
    r = rope.Rope(parse_config(randinit.tiny_config("deepseek_v3")).rope, d, 512)
    cos, sin = r.cos_sin(torch.arange(S))
    hq, hk = rope.apply(q, cos, sin, True), rope.apply(k, cos, sin, True)

    def gptj(x):
        out = x.clone()
        for p in range(S):
            for i in range(d // 2):
                a = p * float(r.inv_freq[i])
                x0, x1 = float(x[p, 2 * i]), float(x[p, 2 * i + 1])
                out[p, 2 * i], out[p, 2 * i + 1] = x0 * math.cos(a) - x1 * math.sin(a), x1 * math.cos(a) + x0 * math.sin(a)
        return out

    assert torch.allclose(hq @ hk.T, gptj(q) @ gptj(k).T, atol=1e-5)


def test_attention_is_causal_gqa():
    """_attend against a per-query loop in float64: query i of head h sees
    keys 0..start+i of kv head h // (nh / nkv)."""
    g = torch.Generator().manual_seed(1)
    B, nh, nkv, S, T, d = 2, 4, 2, 3, 7, 5
    q, k, v = (torch.randn(B, nh, S, d, generator=g), torch.randn(B, nkv, T, d, generator=g),
               torch.randn(B, nkv, T, d, generator=g))
    start = T - S
    got = _attend(q, k, v, 0.3, start)
    want = torch.zeros_like(got, dtype=torch.float64)
    for b in range(B):
        for h in range(nh):
            kh = h // (nh // nkv)
            for i in range(S):
                s = [0.3 * float(q[b, h, i].double() @ k[b, kh, j].double()) for j in range(start + i + 1)]
                m = max(s)
                p = [math.exp(x - m) for x in s]
                want[b, h, i] = sum(pi / sum(p) * v[b, kh, j].double() for j, pi in enumerate(p))
    assert torch.allclose(got.double(), want, atol=1e-5)


def test_deepseek_grouped_selection_brute_force(tmp_path):
    """deepseek_select equals a loop: score each group by its two best
    biased scores, keep the topk_group best groups, set the other groups'
    experts to 0.0 (transformers' masked_fill), take the top_k."""
    net = load(tmp_path, "deepseek_v3")
    c = net.cfg
    g = torch.Generator().manual_seed(4)
    scores, bias = torch.rand(200, 8, generator=g), torch.randn(8, generator=g) * 0.3 - 0.6
    got = net.deepseek_select(scores, bias)
    size = c.num_experts // c.n_group
    picked_masked = 0
    for n in range(200):
        ch = [float(scores[n, e] + bias[e]) for e in range(8)]
        gs = [sum(sorted(ch[gi * size:(gi + 1) * size], reverse=True)[:2]) for gi in range(c.n_group)]
        keep = sorted(range(c.n_group), key=lambda gi: -gs[gi])[:c.topk_group]
        masked = [ch[e] if e // size in keep else 0.0 for e in range(8)]
        want = sorted(range(8), key=lambda e: -masked[e])[:c.top_k]
        assert got[n].tolist() == want
        picked_masked += sum(1 for e in want if e // size not in keep)
    assert picked_masked > 0  # negative biased scores occur, so the 0.0 fill is exercised


@pytest.mark.parametrize("arch", ARCHS)
def test_matches_transformers(tmp_path, arch):
    """transformers' own model on the same checkpoint gives the same logits
    (skipped where transformers is not importable, as in asyncrl's CI)."""
    transformers = pytest.importorskip("transformers")
    make(tmp_path, arch, dtype="F32", bias_std=0.3)
    net = ck.load_model(str(tmp_path))[0]
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path), torch_dtype=torch.float32,
                                                            attn_implementation="eager").eval()
    seq = rand_seqs(1, lo=20, hi=21, seed=8)[0]
    with torch.no_grad():
        want = ref(input_ids=seq.unsqueeze(0)).logits[0, :-1]
        got = net.logits_packed([seq], [torch.arange(1, len(seq))])
    assert float((got - want).abs().max()) < 1e-4
