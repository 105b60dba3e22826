"""Gradients of the recurrent oracle checked by finite differences (torch.autograd.gradcheck)."""

from __future__ import annotations

import pytest
import torch

from falcon_lab.kernels import RULES, fast_weight_rule
from tests.rules_util import rule_inputs


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("alignment,timing,scale_coupled",
                         [("shifted", "raw", False), ("same_time", "rbw", True)])
def test_gradcheck_recurrent(rule, alignment, timing, scale_coupled):
    x = rule_inputs(rule, B=1, T=5, H=1, Dk=3, Dv=2, seed=7, lam_scale=0.5, requires_grad=True)
    S0 = torch.randn(1, 1, 3, 2, dtype=torch.float64, requires_grad=True)

    def f(q, k, v, beta, lam, S):
        o, st = fast_weight_rule(q, k, v, beta, lam, rule=rule, window=3, alignment=alignment, timing=timing,
                                 scale_coupled_ridge=scale_coupled, initial_state=S, output_final_state=True)
        return o, st.S

    assert torch.autograd.gradcheck(f, (*x.values(), S0), eps=1e-6, atol=1e-6, rtol=1e-5)


def test_gradients_are_finite_with_zero_keys_and_no_eps():
    """ε = 0 and x = 0: η := 0 where the denominator vanishes, in the forward and the backward."""
    for rule in RULES:
        x = rule_inputs(rule, T=6, seed=8, requires_grad=False)
        x["k"] = torch.zeros_like(x["k"])
        x["lam"] = torch.zeros_like(x["lam"])
        for t in x.values():
            t.requires_grad_(True)
        o, st = fast_weight_rule(**x, rule=rule, eps=0.0, output_final_state=True)
        (o.sum() + st.S.sum()).backward()
        assert torch.isfinite(o).all() and torch.isfinite(st.S).all(), rule
        for name, t in x.items():
            assert torch.isfinite(t.grad).all(), (rule, name)
