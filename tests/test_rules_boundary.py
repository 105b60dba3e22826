"""The boundary conventions of SPEC §1 on every backend: x₁ = 0 and λ₁ = 0 on a fresh shifted sequence,
and no NaN or inf anywhere when ε = 0 and x = 0 (η := 0 where a denominator is 0)."""

from __future__ import annotations

import pytest
import torch

from falcon_lab.kernels import RULES, fast_weight_rule
from tests.rules_util import rel_err, rule_inputs

BACKENDS = ["recurrent", "masked", "chunk"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rule", RULES)
def test_first_shifted_token_neither_writes_nor_decays(rule, backend):
    """From a non-zero S₀, the first token of a fresh shifted sequence leaves S₀ as it is, whatever λ₁."""
    x = rule_inputs(rule, T=1, seed=31, lam_scale=100.0)
    S0 = torch.randn(2, 2, 4, 3, dtype=torch.float64)
    o, state = fast_weight_rule(**x, rule=rule, backend=backend, initial_state=S0, output_final_state=True)
    assert torch.equal(state.S, S0)
    ref = torch.einsum("bhkv,bhk->bhv", S0, x["q"][:, 0])
    assert rel_err(o[:, 0], ref) < 1e-14


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rule", RULES)
def test_zero_keys_and_no_eps_stay_finite(rule, backend):
    x = rule_inputs(rule, T=9, seed=32)
    x["k"][:, 3:6] = 0.0  # zero write features in the middle of the sequence
    for lam_zero in (True, False):
        if lam_zero:
            x["lam"] = torch.zeros_like(x["lam"])
        o, state = fast_weight_rule(**x, rule=rule, backend=backend, eps=0.0, chunk_size=4,
                                    output_final_state=True)
        assert torch.isfinite(o).all() and torch.isfinite(state.S).all()
        ref, _ = fast_weight_rule(**x, rule=rule, eps=0.0)
        assert rel_err(o, ref) < 1e-10


@pytest.mark.parametrize("rule", RULES)
def test_decay_clamp_keeps_the_carry_at_the_floor(rule):
    """λ huge and β > 1 − ε_γ: ηλ → β exceeds 1 − ε_γ, so the carry is clamped to ε_γ and never turns
    negative."""
    x = rule_inputs(rule, T=2, seed=33, lam_scale=1e6, beta_range=(1.5, 1.9))
    x["lam"] = x["lam"] + 1e6
    x["v"] = torch.zeros_like(x["v"])
    S0 = torch.ones(2, 2, 4, 3, dtype=torch.float64)
    _, state = fast_weight_rule(**x, rule=rule, initial_state=S0, output_final_state=True, decay_floor=0.25,
                                alignment="same_time", eps=0.0)
    assert torch.isfinite(state.S).all()
    if rule.endswith("a"):  # inner-product rules: S_2 = γ² S_0 with γ = ε_γ exactly
        assert rel_err(state.S, 0.25 ** 2 * S0) < 1e-12
