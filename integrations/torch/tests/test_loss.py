"""Loss vectors. The reference below is SkyRL's math re-derived independently in
numpy, in SkyRL's own shape (padded [B, L] tensors, reduction folded into the
advantages, then a masked sum), from NovaSky-AI/SkyRL
skyrl/backends/skyrl_train/utils/ppo_utils.py (ppo_policy_loss, gspo_policy_loss,
compute_policy_loss_cispo, apply_loss_reduction_to_advantages_minibatch,
reduce_loss, compute_grpo_outcome_advantage) and
skyrl/backends/skyrl_train/utils/off_policy_correction_utils.py (compute_tis_ratio);
the KL (k3 vs the rollout logprobs) and entropy terms as asyncrl's model/train.go."""

import math

import numpy as np
import pytest
import torch

from asyncrl_worker.loss import (LossConfig, grpo_advantages, policy_loss, sequence_weights, token_loss)

POLICY = ["regular", "dual_clip", "gspo", "cispo"]
REDUCTIONS = ["token_mean", "sequence_mean", "seq_mean_token_sum_norm", "prompt_mean", "token_mean_legacy"]
TIS = ["none", "token", "sequence"]


def np_log_softmax(x):
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def skyrl_reference(cfg, lp, old, roll, ent, mask, adv_seq, groups, mb_size, max_seq_len):
    """SkyRL's policy loss for one mini-batch: lp/old/roll/ent/mask are [B, L]."""
    B, L = lp.shape
    A = np.repeat(adv_seq[:, None], L, axis=1).astype(np.float64)
    # apply_loss_reduction_to_advantages_minibatch
    red = cfg.loss_reduction
    if red == "token_mean":
        A = A / max(mask.sum(), 1)
    elif red == "token_mean_legacy":
        n_mb = B // mb_size
        for i in range(n_mb):
            sl = slice(i * mb_size, (i + 1) * mb_size)
            A[sl] = A[sl] / max(mask[sl].sum(), 1) / n_mb
    elif red == "sequence_mean":
        A = A / (B * np.maximum(mask.sum(-1, keepdims=True), 1))
    elif red == "seq_mean_token_sum_norm":
        A = A / (B * max_seq_len)
    elif red == "prompt_mean":
        bounds, start = [], 0
        for i in range(1, B + 1):
            if i == B or groups[i] != groups[start]:
                bounds.append((start, i))
                start = i
        for s, e in bounds:
            A[s:e] = A[s:e] / (len(bounds) * max(mask[s:e].sum(), 1))
    t = cfg.policy_loss_type
    if t == "cispo":
        ratio = np.exp(np.clip(lp - old, -20, 20))
        loss = -A * np.clip(ratio, 1 - cfg.cispo_eps_clip_low, 1 + cfg.cispo_eps_clip_high) * lp
    else:
        if t == "gspo":
            liw = ((lp - old) * mask).sum(-1, keepdims=True) / np.maximum(mask.sum(-1, keepdims=True), 1)
            ratio = np.repeat(np.exp(np.minimum(liw, 10)), L, axis=1)
        else:
            ratio = np.exp(np.clip(lp - old, -20, 20))
        s1 = ratio * A
        s2 = np.clip(ratio, 1 - cfg.eps_clip_low, 1 + cfg.eps_clip_high) * A
        loss = -np.minimum(s1, s2)
        if t == "dual_clip":
            loss = np.where(A < 0, np.minimum(-A * cfg.clip_ratio_c, loss), loss)
    if cfg.tis_ratio_type == "token":
        loss = loss * np.minimum(np.exp(np.clip(old - roll, -20, 20)), cfg.token_tis_ratio_clip_high)
    elif cfg.tis_ratio_type == "sequence":
        s = ((old - roll) * mask).sum(-1, keepdims=True)
        loss = loss * np.minimum(np.exp(np.clip(s, -20, 20)), cfg.sequence_tis_ratio_clip_high)
    pg = (loss * mask).sum()  # reduce_loss
    # asyncrl adds k3(rollout || trainer) and the entropy bonus with the same
    # per-token reduction factor (A / adv is that factor).
    w = np.divide(A, np.repeat(adv_seq[:, None], L, axis=1))
    x = roll - lp
    k3 = np.exp(x) - x - 1
    extra = (w * (cfg.kl_coef * k3 - cfg.entropy_coef * ent) * mask).sum()
    return pg + extra


def make_case(seed):
    rng = np.random.default_rng(seed)
    B, L, V = 4, 6, 7
    lens = [6, 4, 5, 3]
    mask = np.zeros((B, L))
    for b, n in enumerate(lens):
        mask[b, 1:n] = 1  # the first token is never trained
    mask[2, 3] = 0  # a hole inside a generation
    logits = rng.normal(0, 2, (B, L, V))
    targets = rng.integers(0, V, (B, L))
    lp = np.take_along_axis(np_log_softmax(logits), targets[..., None], -1)[..., 0]
    logp = np_log_softmax(logits)
    ent = -(np.exp(logp) * logp).sum(-1)
    old = lp + rng.uniform(-1.5, 1.5, (B, L))
    old[0, 1] = lp[0, 1] - 2.0  # ratio e^2 ≈ 7.4 > clip_ratio_c with A < 0 below
    roll = old + rng.uniform(-1.0, 1.0, (B, L))
    adv = np.array([1.5, -4.0, 0.7, -0.3])
    adv[0] = -4.0  # dual clip binds on sequence 0
    return dict(B=B, L=L, V=V, mask=mask, logits=logits, targets=targets, lp=lp, ent=ent, old=old, roll=roll,
                adv=adv, groups=["a", "a", "b", "b"], mb_size=2)


def run_ours(cfg, c, model_max_seq_len=50):
    seq_tokens = [int(c["mask"][b].sum()) for b in range(c["B"])]
    w = sequence_weights(cfg, seq_tokens, c["groups"], [b // c["mb_size"] for b in range(c["B"])], model_max_seq_len)
    sel = c["mask"].astype(bool)
    sid = np.repeat(np.arange(c["B"])[:, None], c["L"], 1)[sel]
    tl = token_loss(cfg, torch.tensor(c["logits"][sel]), torch.tensor(c["targets"][sel]), torch.tensor(c["roll"][sel]),
                    torch.tensor(c["adv"][sid]), torch.tensor(np.array(w)[sid]), torch.tensor(sid), c["B"],
                    old=torch.tensor(c["old"][sel]))
    return float(tl.total)


@pytest.mark.parametrize("tis", TIS)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("ptype", POLICY)
def test_loss_matches_skyrl_reference(ptype, reduction, tis):
    c = make_case(1)
    cfg = LossConfig(policy_loss_type=ptype, loss_reduction=reduction, tis_ratio_type=tis, eps_clip_low=0.2,
                     eps_clip_high=0.28, cispo_eps_clip_low=0.1, cispo_eps_clip_high=0.5, entropy_coef=0.0,
                     kl_coef=0.0, max_seq_len=50)
    want = skyrl_reference(cfg, c["lp"], c["old"], c["roll"], c["ent"], c["mask"], c["adv"], c["groups"], c["mb_size"], 50)
    got = run_ours(cfg, c)
    assert got == pytest.approx(want, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_kl_and_entropy_terms(reduction):
    c = make_case(2)
    cfg = LossConfig(policy_loss_type="regular", loss_reduction=reduction, entropy_coef=0.05, kl_coef=0.3,
                     max_seq_len=0)
    # max_seq_len 0 = the model's (run_ours passes 50)
    want = skyrl_reference(cfg, c["lp"], c["old"], c["roll"], c["ent"], c["mask"], c["adv"], c["groups"], c["mb_size"], 50)
    assert run_ours(cfg, c) == pytest.approx(want, rel=1e-9)


def test_temperature_divides_logits():
    c = make_case(3)
    cfg = LossConfig(temperature=0.7, entropy_coef=0.0)
    sel = c["mask"].astype(bool)
    logits = c["logits"][sel]
    lp = np.take_along_axis(np_log_softmax(logits / 0.7), c["targets"][sel][:, None], -1)[:, 0]
    n = len(lp)
    tl = token_loss(cfg, torch.tensor(logits), torch.tensor(c["targets"][sel]), torch.tensor(c["roll"][sel]),
                    torch.ones(n), torch.full((n,), 1.0 / n, dtype=torch.float64), torch.zeros(n, dtype=torch.long), 1)
    assert tl.mismatch_sum == pytest.approx(np.abs(lp - c["roll"][sel]).sum(), rel=1e-12)


def test_ratio_one_gives_minus_mean_advantage():
    # old = the trainer's own forward pass (old=None) => ratio 1 everywhere;
    # token_mean => loss = -(sum of token advantages)/tokens.
    rng = np.random.default_rng(4)
    n, V = 9, 5
    adv = torch.tensor(rng.normal(size=n))
    for ptype in POLICY[:3]:
        cfg = LossConfig(policy_loss_type=ptype, entropy_coef=0.0)
        tl = token_loss(cfg, torch.tensor(rng.normal(size=(n, V))), torch.tensor(rng.integers(0, V, n)),
                        torch.full((n,), -1.0, dtype=torch.float64), adv, torch.full((n,), 1.0 / n, dtype=torch.float64),
                        torch.zeros(n, dtype=torch.long), 1)
        assert float(tl.total) == pytest.approx(-float(adv.mean()), rel=1e-12), ptype
        assert tl.clipped == 0


def one(ptype, lp, old, adv, **kw):
    cfg = LossConfig(policy_loss_type=ptype, **kw)
    lp_t = torch.tensor([lp], dtype=torch.float64, requires_grad=True)
    loss, clipped = policy_loss(cfg, lp_t, torch.tensor([old], dtype=torch.float64),
                                torch.tensor([adv], dtype=torch.float64), torch.zeros(1, dtype=torch.long), 1)
    loss.sum().backward()
    return float(loss), float(lp_t.grad), bool(clipped)


def test_clipping_kicks_in_at_the_right_ratios():
    ln = math.log
    # A > 0: the ratio is capped at 1 + eps_clip_high (0.2) and the gradient vanishes.
    assert one("regular", ln(1.1), 0.0, 1.0)[:3] == pytest.approx((-1.1, -1.1, False))
    loss, g, clipped = one("regular", ln(1.3), 0.0, 1.0)
    assert (loss, g, clipped) == (pytest.approx(-1.2), 0.0, True)
    # A < 0: floor at 1 - eps_clip_low (0.2).
    assert one("regular", ln(0.9), 0.0, -1.0)[:3] == pytest.approx((0.9, 0.9, False))
    loss, g, clipped = one("regular", ln(0.7), 0.0, -1.0)
    assert (loss, g, clipped) == (pytest.approx(0.8), 0.0, True)
    # A > 0 with a low ratio, A < 0 with a high ratio: the unclipped branch is the min.
    assert one("regular", ln(0.5), 0.0, 1.0)[:3] == pytest.approx((-0.5, -0.5, False))
    assert one("regular", ln(2.0), 0.0, -1.0)[:3] == pytest.approx((2.0, 2.0, False))
    # asymmetric clip-higher
    assert one("regular", ln(1.25), 0.0, 1.0, eps_clip_high=0.28)[0] == pytest.approx(-1.25)


def test_dual_clip_lower_bound():
    ln = math.log
    # A = -1, ratio 5: PPO loss 5, capped at -A * clip_ratio_c = 3, no gradient.
    loss, g, _ = one("dual_clip", ln(5.0), 0.0, -1.0, clip_ratio_c=3.0)
    assert (loss, g) == (pytest.approx(3.0), 0.0)
    # ratio 2 < 3: unchanged
    assert one("dual_clip", ln(2.0), 0.0, -1.0)[0] == pytest.approx(2.0)
    # A > 0 untouched by the dual clip
    assert one("dual_clip", ln(5.0), 0.0, 1.0)[0] == pytest.approx(-1.2)


def test_cispo_keeps_gradient_when_clipped():
    ln = math.log
    # weight clamp(r, 1 - 0, 1 + 5) = 6 for r = e^2; loss -A*6*lp, gradient -A*6.
    loss, g, clipped = one("cispo", -1.0, -3.0, 1.0)
    assert (loss, g, clipped) == (pytest.approx(6.0), pytest.approx(-6.0), True)
    loss, g, clipped = one("cispo", -0.5, -0.5 - ln(1.5), 2.0)
    assert (loss, g, clipped) == (pytest.approx(1.5), pytest.approx(-3.0), False)


def test_gspo_uses_the_sequence_ratio():
    cfg = LossConfig(policy_loss_type="gspo")
    lp = torch.tensor([-1.0, -2.0, -0.5], dtype=torch.float64, requires_grad=True)
    old = torch.tensor([-1.1, -2.0, -0.6], dtype=torch.float64)  # mean log ratio (0.1+0+0.1)/3
    loss, _ = policy_loss(cfg, lp, old, torch.ones(3, dtype=torch.float64), torch.zeros(3, dtype=torch.long), 1)
    r = math.exp(0.2 / 3)
    assert loss.detach().numpy() == pytest.approx([-r] * 3)
    loss.sum().backward()
    assert lp.grad.numpy() == pytest.approx([-r] * 3)


def test_grpo_advantages_vector():
    rewards = [1.0, 0.0, 1.0, 0.5, 3.0, 3.0, 2.0, 4.0]
    groups = ["a", "a", "a", "b", "c", "c", "d", "d"]
    std_a = math.sqrt(((1 / 3) ** 2 * 2 + (2 / 3) ** 2) / 2)
    e = 1e-6
    want = [(1 / 3) / (std_a + e), (-2 / 3) / (std_a + e), (1 / 3) / (std_a + e),
            0.5 / (1 + e),  # singleton: mean 0, std 1
            0.0, 0.0,  # zero variance
            -1 / (math.sqrt(2) + e), 1 / (math.sqrt(2) + e)]
    assert grpo_advantages(rewards, groups, True, e).numpy() == pytest.approx(want, rel=1e-12)
    want_raw = [1 / 3, -2 / 3, 1 / 3, 0.5, 0.0, 0.0, -1.0, 1.0]
    assert grpo_advantages(rewards, groups, False, e).numpy() == pytest.approx(want_raw, rel=1e-12)


def test_reduction_weights_by_hand():
    toks, groups, mbs = [3, 1, 0, 4], ["a", "a", "b", "c"], [0, 0, 1, 1]
    w = lambda red, **kw: sequence_weights(LossConfig(loss_reduction=red, **kw), toks, groups, mbs, 100)
    assert w("token_mean") == pytest.approx([1 / 8] * 4)
    assert w("sequence_mean") == pytest.approx([1 / 12, 1 / 4, 1 / 4, 1 / 16])
    assert w("seq_mean_token_sum_norm", max_seq_len=10) == pytest.approx([1 / 40] * 4)
    assert w("seq_mean_token_sum_norm") == pytest.approx([1 / 400] * 4)  # 0 = the model's max_seq_len
    assert w("prompt_mean") == pytest.approx([1 / 12, 1 / 12, 1 / 3, 1 / 12])  # 3 prompts; b has 0 tokens -> clamp 1
    assert w("token_mean_legacy") == pytest.approx([1 / 8, 1 / 8, 1 / 8, 1 / 8])  # both microbatches hold 4
    assert sequence_weights(LossConfig(loss_reduction="token_mean_legacy"), [2, 2, 4], ["", "", ""], [0, 0, 1], 1) == \
        pytest.approx([1 / 8, 1 / 8, 1 / 8])


def test_config_validation_names_the_field():
    for kw, field in [({"policy_loss_type": "ppo"}, "policy_loss_type"), ({"eps_clip_low": 1.0}, "eps_clip_low"),
                      ({"clip_ratio_c": 1.0}, "clip_ratio_c"), ({"temperature": 0.0}, "temperature"),
                      ({"loss_reduction": "mean"}, "loss_reduction"), ({"tis_ratio_type": "seq"}, "tis_ratio_type")]:
        with pytest.raises(ValueError) as e:
            LossConfig(**kw).validate()
        assert e.value.args[0] == field
    c = LossConfig(tis_ratio_type="")
    c.validate()
    assert c.tis_ratio_type == "none"


E = math.exp
# The table of asyncrl's Go test model/skyrl_loss_test.go
# (TestPolicyTokenSkyRLFormulas: worked by hand from SkyRL's formulas): the Go
# trainer and this worker must agree token by token.
# (policy type, lp, old, A, sequence log-importance weight for gspo, loss, d loss/d lp, clipped)
GO_TABLE = [
    ("regular", -1, -1, 2, None, -2, -2, False),
    ("regular", -1, -1.5, 1, None, -1.2, 0, True),
    ("regular", -1, -1.5, -1, None, E(0.5), E(0.5), False),
    ("regular", -1.5, -1, -1, None, 0.8, 0, True),
    ("regular", 0, -25, -1, None, E(20), 0, False),  # safe_exp_delta's clamp at 20
    ("dual_clip", -1, -3, -1, None, 3, 0, False),
    ("dual_clip", -1, -1.5, -1, None, E(0.5), E(0.5), False),
    ("dual_clip", -1, -3, 1, None, -1.2, 0, True),
    ("cispo", -1, -3, 1, None, 6, -6, True),
    ("cispo", -0.5, -0.7, 2, None, E(0.2), -2 * E(0.2), False),
    ("cispo", -1, -0.5, 1, None, 1, -1, True),
]


@pytest.mark.parametrize("row", GO_TABLE, ids=lambda r: f"{r[0]}-{r[1]}-{r[2]}-{r[3]}")
def test_agrees_with_go_policy_token_table(row):
    ptype, lp, old, adv, _, want_loss, want_grad, want_clipped = row
    loss, grad, clipped = one(ptype, float(lp), float(old), float(adv))
    assert loss == pytest.approx(want_loss, rel=1e-9)
    assert grad == pytest.approx(want_grad, rel=1e-9, abs=1e-12)
    assert clipped == want_clipped


@pytest.mark.parametrize("log_iw,want_loss,want_grad,want_clipped", [(0.1, -E(0.1), -E(0.1), False),
                                                                      (0.3, -1.2, 0.0, True)])
def test_agrees_with_go_gspo_rows(log_iw, want_loss, want_grad, want_clipped):
    # Go's gspo rows: one token, A = 1, the sequence's log-importance weight given.
    # A second token carries the sequence mean: lp - old = 2*log_iw - 0 on token 2.
    cfg = LossConfig(policy_loss_type="gspo")
    lp = torch.tensor([-1.0, -1.0], dtype=torch.float64, requires_grad=True)
    old = torch.tensor([-1.0, -1.0 - 2 * log_iw], dtype=torch.float64)
    loss, clipped = policy_loss(cfg, lp, old, torch.ones(2, dtype=torch.float64), torch.zeros(2, dtype=torch.long), 1)
    loss[0].backward()
    assert float(loss[0]) == pytest.approx(want_loss) and float(lp.grad[0]) == pytest.approx(want_grad, abs=1e-12)
    assert bool(clipped[0]) == want_clipped


@pytest.mark.parametrize("old,rollout,want", [(-1, -2, 2), (-1, -0.5, E(-0.5)), (-1, -1, 1), (0, -30, 2)])
def test_agrees_with_go_tis_table(old, rollout, want):
    # model/skyrl_loss_test.go TestTISRatioSkyRLFormula (token cap 2)
    from asyncrl_worker.loss import tis_factor
    cfg = LossConfig(tis_ratio_type="token", token_tis_ratio_clip_high=2.0)
    got = tis_factor(cfg, torch.tensor([float(old)], dtype=torch.float64), torch.tensor([float(rollout)], dtype=torch.float64),
                     torch.zeros(1, dtype=torch.long), 1)
    assert float(got) == pytest.approx(want, rel=1e-12)
