"""The masked and chunk forms of falcon-3 against the recurrent oracle, in float64.

Outputs, every field of the final state, continuation from a state handed over by the oracle (the window
tail must carry), gradients, and zero keys with eps = 0.
"""

from __future__ import annotations

import zlib

import pytest
import torch

from falcon_lab.kernels.common.config import RuleConfig
from falcon_lab.kernels.common.prepare import prepare
from falcon_lab.kernels.common.state import fresh_state
from falcon_lab.kernels.falcon.api import fast_weight_rule
from falcon_lab.kernels.window.eigen import top_eigenvalue
from tests.rules_util import gain

F64 = torch.float64
TOL = 1e-10
ALIGNMENTS = ("shifted", "same_time")
TIMINGS = ("raw", "rbw")
FIELDS = ("S", "last_key", "x_tail", "v_tail", "tail_mask")


def rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out − ref|| / max(||ref||, tiny)."""
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm().clamp(min=1e-300)).item()


def generator(*case: object) -> torch.Generator:
    """A generator seeded by the test case, so every case draws its own reproducible inputs."""
    return torch.Generator().manual_seed(zlib.crc32(repr(case).encode()))


def inputs(gen: torch.Generator, T: int, batch: int = 2, heads: int = 2, dk: int = 4, dv: int = 3,
           normalize: bool = True) -> tuple[torch.Tensor, ...]:
    """q, k, v, beta, lam and a nonzero S_0. β spans (0, 2) with values above 1; λ mixes 0, moderate
    values and values large enough to hit the decay clamp (ηλ > 1 − ε_γ)."""
    q, k = (torch.randn(batch, T, heads, dk, generator=gen, dtype=F64) for _ in range(2))
    v = torch.randn(batch, T, heads, dv, generator=gen, dtype=F64)
    if normalize:
        beta = 0.05 + 1.9 * torch.rand(batch, T, heads, generator=gen, dtype=F64)
    else:  # β is the step size η itself: keep η ‖x‖² in a stable range
        beta = 0.02 + 0.3 * torch.rand(batch, T, heads, generator=gen, dtype=F64)
    scale = torch.tensor([0.0, 0.5, 200.0], dtype=F64)[torch.randint(0, 3, (batch, T, heads), generator=gen)]
    lam = scale * torch.rand(batch, T, heads, generator=gen, dtype=F64)
    S0 = torch.randn(batch, heads, dk, dv, generator=gen, dtype=F64)
    return q, k, v, beta, lam, S0


def run(backend: str, q, k, v, beta, lam, initial_state, chunk_size: int = 64, normalize: bool = True,
        **opts):
    return fast_weight_rule(q, k, v, lam=lam, **gain(beta, normalize), rule="falcon-3", backend=backend,
                            chunk_size=chunk_size, initial_state=initial_state, output_final_state=True, **opts)


def assert_same(out, final, ref_out, ref_final, what: str) -> None:
    assert rel(out, ref_out) <= TOL, f"{what}: outputs differ by {rel(out, ref_out):.3g}"
    for field in FIELDS:
        got, want = getattr(final, field), getattr(ref_final, field)
        assert got.shape == want.shape, f"{what}: final {field} shape {tuple(got.shape)} != {tuple(want.shape)}"
        if field == "tail_mask":
            assert torch.equal(got, want), f"{what}: final tail_mask differs"
        else:
            assert rel(got, want) <= TOL, f"{what}: final {field} differs by {rel(got, want):.3g}"


@pytest.mark.parametrize("window", [1, 2, 4, 5])
@pytest.mark.parametrize("T", [1, 2, 7, 63, 130])
@pytest.mark.parametrize("timing", TIMINGS)
@pytest.mark.parametrize("alignment", ALIGNMENTS)
def test_forms_match_oracle(alignment: str, timing: str, T: int, window: int) -> None:
    gen = generator(alignment, timing, T, window)
    q, k, v, beta, lam, S0 = inputs(gen, T)
    opts = dict(window=window, alignment=alignment, timing=timing, scale_coupled_ridge=T % 2 == 1)
    ref_out, ref_final = run("recurrent", q, k, v, beta, lam, S0, **opts)
    out, final = run("masked", q, k, v, beta, lam, S0, **opts)
    assert_same(out, final, ref_out, ref_final, "masked")
    for chunk in (1, 3, 16, 64):
        out, final = run("chunk", q, k, v, beta, lam, S0, chunk_size=chunk, **opts)
        assert_same(out, final, ref_out, ref_final, f"chunk {chunk}")


def test_inputs_reach_the_clamp_and_gains_above_one() -> None:
    """The grid above exercises β > 1 and the decay clamp, in both ridge couplings."""
    q, k, v, beta, lam, S0 = inputs(generator("clamp"), 63)
    for coupled in (False, True):
        cfg = RuleConfig(rule="falcon-3", window=4, scale_coupled_ridge=coupled)
        state = fresh_state(2, 2, 4, 3, cfg.span, F64, "cpu", S0)
        prep = prepare(k, v, beta, lam, cfg, state, fresh=True, top_eigenvalue=top_eigenvalue)
        ridge = lam * prep.energy if coupled else lam
        assert (prep.eta * ridge > 1 - cfg.decay_floor).any(), "no token hits the decay clamp"
        assert torch.isclose(prep.gamma, torch.tensor(cfg.decay_floor, dtype=F64)).any()
    assert (beta > 1).any()


@pytest.mark.parametrize("coupled, normalize", [(True, True), (False, False), (True, False)])
@pytest.mark.parametrize("timing", TIMINGS)
@pytest.mark.parametrize("alignment", ALIGNMENTS)
def test_ridge_coupling_and_step_size_reading(alignment: str, timing: str, coupled: bool, normalize: bool) -> None:
    gen = generator(alignment, timing, coupled, normalize)
    q, k, v, beta, lam, S0 = inputs(gen, 23, normalize=normalize)
    opts = dict(window=4, alignment=alignment, timing=timing, scale_coupled_ridge=coupled, normalize=normalize)
    ref_out, ref_final = run("recurrent", q, k, v, beta, lam, S0, **opts)
    for backend, chunk in (("masked", 64), ("chunk", 5), ("chunk", 8)):
        out, final = run(backend, q, k, v, beta, lam, S0, chunk_size=chunk, **opts)
        assert_same(out, final, ref_out, ref_final, f"{backend} {chunk}")


@pytest.mark.parametrize("backend, chunk", [("masked", 64), ("chunk", 3), ("chunk", 4)])
@pytest.mark.parametrize("first", [2, 9])
@pytest.mark.parametrize("window", [2, 5])
@pytest.mark.parametrize("alignment", ALIGNMENTS)
def test_continuation_from_oracle_state(alignment: str, window: int, first: int, backend: str, chunk: int) -> None:
    """First segment by the oracle, second by the form under test: equal to one pass of the oracle."""
    T = 17
    q, k, v, beta, lam, S0 = inputs(generator(alignment, window, first), T)
    opts = dict(window=window, alignment=alignment, timing="raw")
    ref_out, ref_final = run("recurrent", q, k, v, beta, lam, S0, **opts)
    head = (t[:, :first] for t in (q, k, v, beta, lam))
    tail = [t[:, first:] for t in (q, k, v, beta, lam)]
    _, mid = run("recurrent", *head, S0, **opts)
    assert mid.tail_mask.any(), "the handed-over window tail holds no pair"
    out, final = run(backend, *tail, mid, chunk_size=chunk, **opts)
    assert_same(out, final, ref_out[:, first:], ref_final, f"{backend} after {first} tokens")
    # the tail matters: dropping it (a fresh start from S alone) changes the result
    if window > 1:
        dropped, _ = run(backend, *tail, mid.S, chunk_size=chunk, **opts)
        assert rel(dropped, ref_out[:, first:]) > 1e-6


def _grads(backend: str, chunk: int, tensors, opts, continued: bool):
    leaves = [t.clone().requires_grad_(True) for t in tensors]
    q, k, v, beta, lam, S0 = leaves
    state = S0
    if continued:  # a non-fresh state: S carries the gradient, the tail comes from a warm-up run
        _, warm = run("recurrent", *(t[:, :3].detach() for t in tensors[:5]), tensors[5], **opts)
        state = warm._replace(S=S0)
        q, k, v, beta, lam = (t[:, 3:] for t in (q, k, v, beta, lam))
    out, final = run(backend, q, k, v, beta, lam, state, chunk_size=chunk, **opts)
    wo = torch.cos(torch.arange(out.numel(), dtype=F64)).reshape(out.shape)
    ws = torch.sin(torch.arange(final.S.numel(), dtype=F64)).reshape(final.S.shape)
    ((out * wo).sum() + (final.S * ws).sum()).backward()
    return [t.grad for t in leaves]


@pytest.mark.parametrize("continued", [False, True])
@pytest.mark.parametrize("timing", TIMINGS)
@pytest.mark.parametrize("alignment", ALIGNMENTS)
def test_gradients_match_oracle(alignment: str, timing: str, continued: bool) -> None:
    tensors = inputs(generator("grad", alignment, timing, continued), 11)
    opts = dict(window=3, alignment=alignment, timing=timing, scale_coupled_ridge=continued)
    ref = _grads("recurrent", 64, tensors, opts, continued)
    for backend, chunk in (("chunk", 3), ("chunk", 4), ("masked", 64)):
        got = _grads(backend, chunk, tensors, opts, continued)
        for name, g, r in zip(("q", "k", "v", "beta", "lam", "S0"), got, ref):
            assert rel(g, r) <= TOL, f"{backend} {chunk}: d{name} differs by {rel(g, r):.3g}"


@pytest.mark.parametrize("coupled", [False, True])
@pytest.mark.parametrize("alignment", ALIGNMENTS)
def test_zero_keys_with_zero_eps_stay_finite(alignment: str, coupled: bool) -> None:
    q, k, v, beta, lam, S0 = inputs(generator("zero", alignment, coupled), 9)
    k = torch.zeros_like(k)
    opts = dict(window=4, alignment=alignment, eps=0.0, scale_coupled_ridge=coupled)
    ref_out, _ = run("recurrent", q, k, v, beta, lam, S0, **opts)
    for backend, chunk in (("masked", 64), ("chunk", 4)):
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v, beta, lam, S0)]
        out, final = run(backend, *leaves, chunk_size=chunk, **opts)
        assert torch.isfinite(out).all() and torch.isfinite(final.S).all()
        assert rel(out, ref_out) <= TOL
        (out.sum() + final.S.sum()).backward()
        for name, leaf in zip(("q", "k", "v", "beta", "lam", "S0"), leaves):
            assert torch.isfinite(leaf.grad).all(), f"{backend}: d{name} is not finite"


@pytest.mark.parametrize("form", ["masked", "chunk"])
def test_forms_refuse_other_rules(form: str) -> None:
    from falcon_lab.kernels.window.chunk import chunk_falcon3
    from falcon_lab.kernels.window.masked import masked_falcon3

    fn = {"masked": masked_falcon3, "chunk": chunk_falcon3}[form]
    q, k, v, beta, lam, S0 = inputs(generator("refuse"), 3)
    cfg = RuleConfig(rule="falcon-1")
    with pytest.raises(ValueError, match="falcon-3"):
        fn(q, k, v, beta, lam, cfg, fresh_state(2, 2, 4, 3, 1, F64, "cpu", S0), True)


def test_chunk_size_is_checked_at_the_op() -> None:
    """The op checks chunk_size once, before any form runs (the forms trust it)."""
    q, k, v, beta, lam, S0 = inputs(generator("size"), 3)
    for chunk_size in (0, -4, 2.5, True):
        with pytest.raises(ValueError, match="chunk_size must be an integer >= 1"):
            run("chunk", q, k, v, beta, lam, S0, chunk_size=chunk_size)


@pytest.mark.parametrize("rule", ["falcon-3", "falcon-3a"])
@pytest.mark.parametrize("alignment", ALIGNMENTS)
def test_prepare_takes_keys_in_their_own_dtype_and_zeroes_every_slot_without_a_pair(rule: str, alignment: str) -> None:
    """The fused forms hand `prepare` bf16 keys and values: the pairs come out float32 with the values a float32 copy
    of the keys would give, and every slot that holds no pair is exactly 0 (an invalid tail slot of a continuing
    state even where the state holds something there; a fresh sequence's boundary pair)."""
    cfg = RuleConfig(rule=rule, window=4, alignment=alignment)
    gen = torch.Generator().manual_seed(11)
    k, v = (torch.randn(2, 9, 2, 4, generator=gen).bfloat16() for _ in range(2))
    beta, lam = torch.rand(2, 9, 2, generator=gen) + 0.5, torch.rand(2, 9, 2, generator=gen)
    for fresh in (True, False):
        state = fresh_state(2, 2, 4, 4, cfg.span, torch.float32, "cpu")
        if not fresh:  # a continuing state whose first tail slot holds no pair but is not zero
            state.x_tail.normal_(generator=gen)
            state.v_tail.normal_(generator=gen)
            state.last_key.normal_(generator=gen)
            state.tail_mask[:] = torch.tensor([False, True, True])
        low = prepare(k, v, beta, lam, cfg, state, fresh, top_eigenvalue)
        high = prepare(k.float(), v.float(), beta, lam, cfg, state, fresh, top_eigenvalue)
        assert low.x_ext.dtype == low.y_ext.dtype == torch.float32
        for name in ("x_ext", "y_ext", "energy", "eta", "gamma", "n_pairs"):
            torch.testing.assert_close(getattr(low, name), getattr(high, name), rtol=0, atol=0, msg=name)
        held = low.valid_ext[..., None, None].expand_as(low.x_ext)
        assert (low.x_ext[~held] == 0).all(), "a slot without a pair holds a nonzero x"
        assert low.valid_ext[:, : cfg.span - 1].tolist() == ([[False] * 3] * 2 if fresh else [[False, True, True]] * 2)


@pytest.mark.parametrize("W", [1, 2, 3, 4, 6])
def test_the_window_gram_is_each_windows_gram_matrix_and_its_gradient(W: int) -> None:
    """μ_t's W × W Gram from the lag products along the sequence: every entry x_{t+i} · x_{t+j} of every token's
    window, and the same gradient as the product of each window with itself."""
    from falcon_lab.kernels.common.prepare import window_gram, windows

    torch.manual_seed(W)
    x = torch.randn(2, 9 + W, 3, 5, dtype=F64, requires_grad=True)
    xw = windows(x, W).transpose(2, 3)  # [B, T, H, W, D]
    want = xw @ xw.transpose(-1, -2)
    got = window_gram(x, W)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-13, atol=1e-13)
    g = torch.randn_like(want)
    torch.testing.assert_close(torch.autograd.grad(got, x, g)[0], torch.autograd.grad(want, x, g)[0],
                               rtol=1e-13, atol=1e-13)
