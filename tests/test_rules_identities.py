"""The identities of SPEC §1, on the recurrent oracle: reductions between rules, the eigenvalue 1 − β
along x, Lemma 3.1's descent, and falcon-1 ≡ the gated delta rule under its mapping."""

from __future__ import annotations

import pytest
import torch

from falcon_lab.kernels import fast_weight_rule, fast_weight_step
from tests.rules_util import rel_err, rule_inputs

ALIGN_TIMING = [(a, t) for a in ("shifted", "same_time") for t in ("raw", "rbw")]


@pytest.mark.parametrize("alignment,timing", ALIGN_TIMING)
@pytest.mark.parametrize("sliding,single", [("falcon-3", "falcon-1"), ("falcon-3a", "falcon-1a")])
@pytest.mark.parametrize("scale_coupled", [False, True])
def test_window_one_reduces_to_the_single_pair_rule(sliding, single, alignment, timing, scale_coupled):
    x = rule_inputs(single, T=11, seed=1)
    kw = dict(alignment=alignment, timing=timing, scale_coupled_ridge=scale_coupled, output_final_state=True)
    o3, s3 = fast_weight_rule(**x, rule=sliding, window=1, **kw)
    o1, s1 = fast_weight_rule(**x, rule=single, **kw)
    assert rel_err(o3, o1) < 1e-12 and rel_err(s3.S, s1.S) < 1e-12


@pytest.mark.parametrize("alignment,timing", ALIGN_TIMING)
@pytest.mark.parametrize("per_channel,scalar", [("falcon-2", "falcon-1"), ("falcon-2a", "falcon-1a")])
def test_equal_channel_gains_reduce_to_the_scalar_rule(per_channel, scalar, alignment, timing):
    x = rule_inputs(scalar, T=9, seed=2, lam_scale=3.0)
    beta_cols = x["beta"][..., None].expand(*x["beta"].shape, x["v"].shape[-1]).contiguous()
    o2, s2 = fast_weight_rule(x["q"], x["k"], x["v"], beta_cols, x["lam"], rule=per_channel,
                              alignment=alignment, timing=timing, output_final_state=True)
    o1, s1 = fast_weight_rule(**x, rule=scalar, alignment=alignment, timing=timing, output_final_state=True)
    assert rel_err(o2, o1) < 1e-12 and rel_err(s2.S, s1.S) < 1e-12


def _one_write(rule, S, x, y, beta, lam, eps=0.0):
    """Apply one write of pair (x, y) to S through the public step op (same-time pairing, x = k)."""
    B, H, Dk = x.shape
    from falcon_lab.kernels import FastWeightState

    state = FastWeightState(S=S, last_key=torch.zeros_like(x), x_tail=x.new_zeros(B, H, 0, Dk),
                            v_tail=y.new_zeros(B, H, 0, y.shape[-1]), tail_mask=torch.zeros(B, 0, dtype=torch.bool))
    q = torch.zeros_like(x)
    _, new = fast_weight_step(state, q, x, y, beta, lam, rule=rule, alignment="same_time", eps=eps)
    return new.S


@pytest.mark.parametrize("beta_value", [0.3, 1.0, 1.5, 1.9])
def test_eigenvalue_along_x_is_one_minus_beta(beta_value):
    """ε = λ = 0: the transition S ↦ (I − η x xᵀ) S maps x's direction to (1 − β) times itself."""
    g = torch.Generator().manual_seed(3)
    B, H, Dk, Dv = 2, 2, 5, 3
    x = torch.randn(B, H, Dk, generator=g, dtype=torch.float64)
    beta = torch.full((B, H), beta_value, dtype=torch.float64)
    lam = torch.zeros(B, H, dtype=torch.float64)
    zero_y = torch.zeros(B, H, Dv, dtype=torch.float64)
    # the homogeneous part of the transition: write a zero target
    xhat = x / x.norm(dim=-1, keepdim=True)
    probe = xhat[..., :, None] * torch.randn(B, H, 1, Dv, generator=g, dtype=torch.float64)  # S = x̂ cᵀ
    out = _one_write("falcon-1", probe, x, zero_y, beta, lam)
    assert rel_err(out, (1.0 - beta_value) * probe) < 1e-12
    if beta_value > 1:
        assert (1.0 - beta_value) < 0  # the sign-flip regime
    # directions orthogonal to x are carried unchanged (γ = 1 when λ = 0)
    w = torch.randn(B, H, Dk, generator=g, dtype=torch.float64)
    w = w - (w * xhat).sum(-1, keepdim=True) * xhat
    ortho = w[..., :, None] * torch.randn(B, H, 1, Dv, generator=g, dtype=torch.float64)
    assert rel_err(_one_write("falcon-1", ortho, x, zero_y, beta, lam), ortho) < 1e-12


@pytest.mark.parametrize("rule", ["falcon-1", "falcon-2"])
def test_lemma_3_1_one_write_never_increases_the_instantaneous_loss(rule):
    """Unclamped, β ∈ (0, 2): ℓ_t(S_t) ≤ ℓ_t(S_{t−1}) with ℓ(S) = ½‖Sᵀx − y‖² + (λ/2)‖S‖²_F."""
    g = torch.Generator().manual_seed(4)
    B, H, Dk, Dv = 64, 2, 6, 4
    x = torch.randn(B, H, Dk, generator=g, dtype=torch.float64)
    y = torch.randn(B, H, Dv, generator=g, dtype=torch.float64)
    S = torch.randn(B, H, Dk, Dv, generator=g, dtype=torch.float64)
    beta_shape = (B, H, Dv) if rule == "falcon-2" else (B, H)
    beta = 0.01 + 1.98 * torch.rand(*beta_shape, generator=g, dtype=torch.float64)
    lam = 0.5 * torch.rand(B, H, generator=g, dtype=torch.float64)  # ηλ < 1: the clamp stays off

    def loss(M):
        pred = torch.einsum("bhkv,bhk->bhv", M, x)
        return 0.5 * ((pred - y) ** 2).sum(-1) + 0.5 * lam * (M ** 2).sum((-1, -2))

    after = _one_write(rule, S, x, y, beta, lam, eps=0.0)
    before_l, after_l = loss(S), loss(after)
    assert (after_l <= before_l + 1e-12).all()
    assert (after_l < before_l).float().mean() > 0.9  # a real descent, not a no-op


def gated_delta_reference(q, k, v, g, b):
    """A small gated delta rule of our own: S_t = e^{g_t}(I − b_t k_t k_tᵀ) S_{t−1} + b_t k_t v_tᵀ, o_t = S_tᵀq_t."""
    B, T, H, Dk = k.shape
    S = torch.zeros(B, H, Dk, v.shape[-1], dtype=q.dtype)
    outs = []
    for t in range(T):
        kt, vt = k[:, t], v[:, t]
        decay = g[:, t].exp()[..., None, None]
        S = decay * (S - b[:, t][..., None, None] * kt[..., :, None] * torch.einsum("bhkv,bhk->bhv", S, kt)[..., None, :])
        S = S + b[:, t][..., None, None] * kt[..., :, None] * vt[..., None, :]
        outs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t]))
    return torch.stack(outs, 1)


@pytest.mark.parametrize("alignment", ["shifted", "same_time"])
def test_falcon_1_is_the_gated_delta_rule_under_the_mapping(alignment):
    """k = x, g = log γ, β' = η/γ, v' = γ v (SPEC §1)."""
    x = rule_inputs("falcon-1", T=13, seed=5, lam_scale=4.0)
    o, _ = fast_weight_rule(**x, rule="falcon-1", alignment=alignment, eps=1e-6)
    k = x["k"]
    if alignment == "shifted":
        k = torch.cat([torch.zeros_like(k[:, :1]), k[:, :-1]], dim=1)
    energy = (k * k).sum(-1)
    eta = x["beta"] / (energy + x["lam"] + 1e-6)
    if alignment == "shifted":
        eta[:, 0] = 0.0  # the boundary pair is not a pair
    gamma = 1.0 - torch.clamp(eta * x["lam"], max=1.0 - 1e-3)
    ref = gated_delta_reference(x["q"], k, gamma[..., None] * x["v"], gamma.log(), eta / gamma)
    assert rel_err(o, ref) < 1e-12
