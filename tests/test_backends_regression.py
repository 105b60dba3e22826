"""The masked and chunk-parallel forms of falcon-1 and falcon-2 against the recurrent oracle (float64)."""

from __future__ import annotations

import itertools
import zlib

import pytest
import torch

from falcon_lab.kernels import fast_weight_rule
from tests.rules_util import gain

RULES = ("falcon-1", "falcon-2")
FORMS = (("masked", 64), ("chunk", 1), ("chunk", 4), ("chunk", 16), ("chunk", 64))
TINY = 1e-300


def rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out - ref).norm() / ref.norm().clamp(min=TINY)).item()


def inputs(rule: str, T: int, seed: int, B: int = 2, H: int = 2, Dk: int = 4, Dv: int = 5,
           dtype: torch.dtype = torch.float64) -> dict:
    """Keys of mixed norms, gains across (0, 2) incl. > 1, ridge from 0 up to values that hit the clamp."""
    gen = torch.Generator().manual_seed(seed)
    randn = lambda *s: torch.randn(*s, generator=gen, dtype=dtype)  # noqa: E731
    rand = lambda *s: torch.rand(*s, generator=gen, dtype=dtype)  # noqa: E731
    k = randn(B, T, H, Dk) * (0.2 + 2 * rand(B, T, H, 1))
    beta_shape = (B, T, H, Dv) if rule == "falcon-2" else (B, T, H)
    beta = 0.05 + 1.9 * rand(*beta_shape)
    lam = torch.exp(-3 + 10 * rand(B, T, H)) * (rand(B, T, H) > 0.2)  # 0 up to ~e^7
    return dict(q=randn(B, T, H, Dk), k=k, v=randn(B, T, H, Dv), beta=beta, lam=lam)


def run(x: dict, backend: str, chunk_size: int = 64, normalize: bool = True, **opts):
    return fast_weight_rule(x["q"], x["k"], x["v"], lam=x["lam"], **gain(x["beta"], normalize), backend=backend,
                            chunk_size=chunk_size, output_final_state=True, **opts)


def assert_close(o, st, o_ref, st_ref, tol: float = 1e-10) -> None:
    assert rel(o, o_ref) <= tol
    assert rel(st.S, st_ref.S) <= tol
    assert torch.equal(st.last_key, st_ref.last_key)


@pytest.mark.parametrize("rule,alignment,timing,T", list(itertools.product(
    RULES, ("shifted", "same_time"), ("raw", "rbw"), (1, 2, 7, 63, 130))))
def test_forms_match_oracle(rule: str, alignment: str, timing: str, T: int) -> None:
    x = inputs(rule, T, seed=zlib.crc32(f"{rule}{alignment}{timing}{T}".encode()))
    S0 = torch.randn(2, 2, 4, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(T))
    opts = dict(rule=rule, alignment=alignment, timing=timing, initial_state=S0)
    o_ref, st_ref = run(x, "recurrent", **opts)
    for backend, C in FORMS:
        o, st = run(x, backend, C, **opts)
        assert_close(o, st, o_ref, st_ref)


def test_inputs_reach_the_clamp_and_large_gains() -> None:
    """The drawn inputs do exercise β > 1 and the decay clamp ηλ > 1 − ε_γ (else the tests above are weak)."""
    x = inputs("falcon-1", 130, seed=0)
    energy = (x["k"] ** 2).sum(-1)
    eta_lam = x["beta"] * x["lam"] / (energy + x["lam"] + 1e-6)
    assert (eta_lam > 1 - 1e-3).float().mean() > 0.05
    assert (x["beta"] > 1).any() and (x["lam"] == 0).any()


@pytest.mark.parametrize("rule,scale_coupled_ridge,normalize", [
    ("falcon-1", True, True), ("falcon-2", True, True), ("falcon-1", False, False), ("falcon-2", False, False),
    ("falcon-2", True, False)])
@pytest.mark.parametrize("alignment,timing", [("shifted", "raw"), ("same_time", "rbw")])
def test_ridge_coupling_and_ctx_eta(rule: str, scale_coupled_ridge: bool, normalize: bool, alignment: str,
                                    timing: str) -> None:
    x = inputs(rule, 37, seed=11)
    if not normalize:
        x["beta"] = x["beta"] * 0.3  # read as the step size η itself
        x["lam"] = x["lam"].clamp(max=5.0)
    else:
        x["lam"] = x["lam"] * 1e-2  # λ̄, multiplied by ‖x‖²
    opts = dict(rule=rule, alignment=alignment, timing=timing, scale_coupled_ridge=scale_coupled_ridge,
                normalize=normalize)
    o_ref, st_ref = run(x, "recurrent", **opts)
    for backend, C in (("masked", 64), ("chunk", 8), ("chunk", 5)):
        o, st = run(x, backend, C, **opts)
        assert_close(o, st, o_ref, st_ref)


@pytest.mark.parametrize("rule,alignment,timing", list(itertools.product(
    RULES, ("shifted", "same_time"), ("raw", "rbw"))))
def test_continuation_from_a_recurrent_state(rule: str, alignment: str, timing: str) -> None:
    """A first segment by the oracle, the second by each form: equal to one pass of the oracle."""
    x = inputs(rule, 45, seed=5)
    opts = dict(rule=rule, alignment=alignment, timing=timing)
    o_ref, st_ref = run(x, "recurrent", **opts)
    first = {n: t[:, :17] for n, t in x.items()}
    second = {n: t[:, 17:] for n, t in x.items()}
    o1, st1 = run(first, "recurrent", **opts)
    for backend, C in (("masked", 64), ("chunk", 6), ("chunk", 64)):
        o2, st = run(second, backend, C, initial_state=st1, **opts)
        assert_close(torch.cat([o1, o2], dim=1), st, o_ref, st_ref)


@pytest.mark.parametrize("rule,alignment,timing", list(itertools.product(
    RULES, ("shifted", "same_time"), ("raw", "rbw"))))
def test_gradients_match_oracle(rule: str, alignment: str, timing: str) -> None:
    x = inputs(rule, 11, seed=7, B=1, Dk=3, Dv=4)
    x["lam"] = x["lam"].clamp(max=3.0)  # keep the clamp mostly off: its gradient is zero either way
    S0 = torch.randn(1, 2, 3, 4, dtype=torch.float64)
    gen = torch.Generator().manual_seed(3)
    do = torch.randn(1, 11, 2, 4, dtype=torch.float64, generator=gen)
    dS = torch.randn(1, 2, 3, 4, dtype=torch.float64, generator=gen)

    def grads(backend: str, C: int):
        xs = {n: t.clone().requires_grad_() for n, t in x.items()}
        s0 = S0.clone().requires_grad_()
        o, st = run(xs, backend, C, rule=rule, alignment=alignment, timing=timing, initial_state=s0)
        loss = (o * do).sum() + (st.S * dS).sum()
        return torch.autograd.grad(loss, [*xs.values(), s0])

    ref = grads("recurrent", 64)
    for backend, C in (("masked", 64), ("chunk", 4)):
        for name, g, g_ref in zip(("q", "k", "v", "beta", "lam", "S0"), grads(backend, C), ref):
            assert rel(g, g_ref) <= 1e-10, (backend, C, name)


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("backend,C", [("masked", 64), ("chunk", 4)])
def test_zero_keys_without_eps_stay_finite(rule: str, backend: str, C: int) -> None:
    """eps = 0 and exactly zero keys with λ = 0: η := 0, a no-op step, no NaN in outputs or gradients."""
    x = inputs(rule, 9, seed=2)
    x["k"][:, 2:6] = 0.0
    x["lam"][:, 2:7] = 0.0
    x = {n: t.requires_grad_() for n, t in x.items()}
    opts = dict(rule=rule, eps=0.0, alignment="same_time")
    o, st = run(x, backend, C, **opts)
    o_ref, _ = run(x, "recurrent", **opts)
    assert rel(o, o_ref) <= 1e-10
    grads = torch.autograd.grad(o.sum() + st.S.sum(), list(x.values()))
    assert all(torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("rule", RULES)
def test_carries_at_the_floor_stay_bounded_in_float32(rule: str) -> None:
    """γ = ε_γ on every token across long chunks: the decays underflow to 0, never overflow."""
    x = inputs(rule, 130, seed=4, dtype=torch.float32)
    x["beta"] = torch.full_like(x["beta"], 1.9)
    x["lam"] = torch.full_like(x["lam"], 1e6)
    opts = dict(rule=rule, alignment="shifted")
    o_ref, _ = run(x, "recurrent", **opts)
    for backend, C in (("masked", 64), ("chunk", 64)):
        o, st = run(x, backend, C, **opts)
        assert torch.isfinite(o).all() and torch.isfinite(st.S).all()
        assert rel(o, o_ref) <= 1e-4
