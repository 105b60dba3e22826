"""The masked and chunk forms of falcon-1a/2a/3a against the recurrent oracle, in float64.

Outputs and every field of the final state, fresh (from a nonzero bare S) and continuing from a state the
oracle handed over (last key and window tail must carry), every alignment × timing, odd lengths, chunk sizes
that do not divide T, windows across chunk boundaries, β > 1, the decay clamp, scale-coupled ridge,
η given directly (eta=), strong decay over long sequences, gradients, and zero keys with eps = 0.
"""

from __future__ import annotations

import itertools
import zlib

import pytest
import torch

from falcon_lab.kernels.common.config import RuleConfig
from falcon_lab.kernels.common.prepare import prepare
from falcon_lab.kernels.falcon.api import fast_weight_rule
from tests.rules_util import gain

F64 = torch.float64
TOL = 1e-10
RULES = ("falcon-1a", "falcon-2a", "falcon-3a")
ALIGNMENTS = ("shifted", "same_time")
TIMINGS = ("raw", "rbw")
CHUNKS = (1, 4, 16, 64)
FIELDS = ("S", "last_key", "x_tail", "v_tail", "tail_mask")
PREFIX = 5  # length of the first segment of a continuation


def rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out − ref|| / max(||ref||, tiny)."""
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm().clamp(min=1e-300)).item()


def generator(*case: object) -> torch.Generator:
    """A generator seeded by the test case: every case draws its own reproducible inputs."""
    return torch.Generator().manual_seed(zlib.crc32(repr(case).encode()))


def inputs(gen: torch.Generator, rule: str, T: int, *, batch: int = 2, heads: int = 2, dk: int = 3,
           dv: int = 4, normalize: bool = True) -> dict[str, torch.Tensor]:
    """q, k, v, beta (per channel for 2a), lam. β spans (0, 2) with values above 1; λ mixes 0, moderate
    values and values large enough to hit the decay clamp (ηλ > 1 − ε_γ)."""
    rand = lambda *s: torch.randn(*s, generator=gen, dtype=F64)  # noqa: E731
    beta_shape = (batch, T, heads, dv) if rule == "falcon-2a" else (batch, T, heads)
    lo, hi = (0.05, 1.95) if normalize else (0.02, 0.5)  # without normalisation β is the step size η
    lam_scale = torch.tensor([0.0, 0.5, 60.0], dtype=F64)[torch.randint(0, 3, (batch, T, heads), generator=gen)]
    return {
        "q": rand(batch, T, heads, dk), "k": rand(batch, T, heads, dk), "v": rand(batch, T, heads, dv),
        "beta": lo + (hi - lo) * torch.rand(*beta_shape, generator=gen, dtype=F64),
        "lam": lam_scale * torch.rand(batch, T, heads, generator=gen, dtype=F64),
    }


def segment(x: dict[str, torch.Tensor], start: int, stop: int | None = None) -> dict[str, torch.Tensor]:
    return {name: t[:, start:stop] for name, t in x.items()}


def run(backend: str, x: dict[str, torch.Tensor], initial_state, chunk_size: int = 64, normalize: bool = True,
        **opts):
    x = {name: t for name, t in x.items() if name != "beta"} | gain(x["beta"], normalize)
    return fast_weight_rule(**x, backend=backend, chunk_size=chunk_size, initial_state=initial_state,
                            output_final_state=True, **opts)


def assert_same(out, final, ref_out, ref_final, what: str) -> None:
    assert rel(out, ref_out) <= TOL, f"{what}: outputs differ by {rel(out, ref_out):.3g}"
    for field in FIELDS:
        got, want = getattr(final, field), getattr(ref_final, field)
        assert got.shape == want.shape, f"{what}: final {field} shape {tuple(got.shape)} != {tuple(want.shape)}"
        if field == "tail_mask":
            assert torch.equal(got, want), f"{what}: final tail_mask differs"
        else:
            assert rel(got, want) <= TOL, f"{what}: final {field} differs by {rel(got, want):.3g}"


def assert_forms_match(x, initial_state, chunks=CHUNKS, **opts) -> None:
    """Masked and chunk (each chunk size) equal the oracle in outputs and final state."""
    ref_out, ref_final = run("recurrent", x, initial_state, **opts)
    out, final = run("masked", x, initial_state, **opts)
    assert_same(out, final, ref_out, ref_final, "masked")
    for chunk in chunks:
        out, final = run("chunk", x, initial_state, chunk_size=chunk, **opts)
        assert_same(out, final, ref_out, ref_final, f"chunk_size={chunk}")


def clamp_hits(x: dict[str, torch.Tensor], state, fresh: bool, **opts) -> int:
    """How many tokens have their carry held at the floor (ηλ > 1 − ε_γ)."""
    cfg = RuleConfig(**opts)
    prep = prepare(x["k"], x["v"], x["beta"], x["lam"], cfg, state, fresh)
    floor = 1.0 - (1.0 - cfg.decay_floor)
    return int(torch.isclose(prep.gamma, torch.full_like(prep.gamma, floor), rtol=0, atol=1e-15).sum())


GRID = [(rule, window) for rule in RULES for window in ((1, 2, 4, 5) if rule == "falcon-3a" else (4,))]


@pytest.mark.parametrize("T", [1, 7, 63])
@pytest.mark.parametrize("timing", TIMINGS)
@pytest.mark.parametrize("alignment", ALIGNMENTS)
@pytest.mark.parametrize("rule,window", GRID)
def test_continuation_matches_oracle(rule: str, window: int, alignment: str, timing: str, T: int) -> None:
    """A second segment, continuing from the oracle's state after a first one, in every form."""
    x = inputs(generator(rule, window, alignment, timing, T), rule, PREFIX + T)
    opts = dict(rule=rule, window=window, alignment=alignment, timing=timing)
    _, state = run("recurrent", segment(x, 0, PREFIX), torch.zeros(2, 2, 3, 4, dtype=F64) + 0.3, **opts)
    second = segment(x, PREFIX)
    if T == 63:
        assert clamp_hits(second, state, False, **opts) > 0, "the inputs never reach the decay clamp"
    assert_forms_match(second, state, **opts)


@pytest.mark.parametrize("timing", TIMINGS)
@pytest.mark.parametrize("alignment", ALIGNMENTS)
@pytest.mark.parametrize("rule,window", GRID)
def test_fresh_from_bare_state(rule: str, window: int, alignment: str, timing: str) -> None:
    """A fresh sequence from a nonzero bare S_0 (the fresh shifted boundary is not a pair)."""
    gen = generator("fresh", rule, window, alignment, timing)
    x = inputs(gen, rule, 7)
    S0 = torch.randn(2, 2, 3, 4, generator=gen, dtype=F64)
    assert_forms_match(x, S0, chunks=(1, 3, 64), rule=rule, window=window, alignment=alignment, timing=timing)


OPTIONS = list(itertools.product(RULES, (False, True), (False, True)))


@pytest.mark.parametrize("rule,scale_coupled,normalize", OPTIONS)
def test_ridge_and_normalisation_options(rule: str, scale_coupled: bool, normalize: bool) -> None:
    """Scale-coupled ridge on/off and η given directly (eta=), both alignments, windows crossing chunks."""
    for alignment, timing in (("shifted", "raw"), ("same_time", "rbw")):
        gen = generator("options", rule, scale_coupled, normalize, alignment)
        x = inputs(gen, rule, PREFIX + 23, normalize=normalize)
        opts = dict(rule=rule, window=3, alignment=alignment, timing=timing,
                    scale_coupled_ridge=scale_coupled, normalize=normalize)
        _, state = run("recurrent", segment(x, 0, PREFIX), None, **opts)
        assert_forms_match(segment(x, PREFIX), state, chunks=(2, 5, 16), **opts)


@pytest.mark.parametrize("rule,window,alignment,timing", [
    ("falcon-1a", 4, "shifted", "raw"), ("falcon-2a", 4, "same_time", "rbw"),
    ("falcon-3a", 4, "shifted", "rbw"), ("falcon-3a", 5, "same_time", "raw"),
])
def test_long_sequence_with_strong_decay(rule: str, window: int, alignment: str, timing: str) -> None:
    """T = 130 with most carries at the floor ε_γ: a global product of γ would underflow to 0 (10^−3·130)."""
    gen = generator("long", rule, window, alignment, timing)
    x = inputs(gen, rule, 130)
    x["lam"] = x["lam"] + 60.0 * (torch.rand(x["lam"].shape, generator=gen, dtype=F64) < 0.8)
    x["beta"] = x["beta"].clamp(min=1.2) if rule != "falcon-2a" else x["beta"]
    opts = dict(rule=rule, window=window, alignment=alignment, timing=timing)
    S0 = torch.randn(2, 2, 3, 4, generator=gen, dtype=F64)
    assert_forms_match(x, S0, chunks=(7, 16, 64), **opts)


@pytest.mark.parametrize("timing", TIMINGS)
@pytest.mark.parametrize("alignment", ALIGNMENTS)
@pytest.mark.parametrize("rule,window", [("falcon-1a", 1), ("falcon-2a", 1), ("falcon-3a", 3)])
def test_gradients_match_oracle(rule: str, window: int, alignment: str, timing: str) -> None:
    """d/d(q, k, v, beta, lam, S_0) of outputs and final S, from a continued state, chunk and masked."""
    gen = generator("grad", rule, window, alignment, timing)
    x = inputs(gen, rule, PREFIX + 11)
    opts = dict(rule=rule, window=window, alignment=alignment, timing=timing, scale_coupled_ridge=True)
    _, state = run("recurrent", segment(x, 0, PREFIX), None, **opts)
    second = {name: t.clone().requires_grad_(True) for name, t in segment(x, PREFIX).items()}
    S0 = state.S.clone().requires_grad_(True)
    state = state._replace(S=S0)
    leaves = [*second.values(), S0]
    co_o = torch.randn(2, 11, 2, 4, generator=gen, dtype=F64)
    co_S = torch.randn(2, 2, 3, 4, generator=gen, dtype=F64)

    def grads(backend: str, chunk: int = 64):
        out, final = run(backend, second, state, chunk_size=chunk, **opts)
        return torch.autograd.grad((out * co_o).sum() + (final.S * co_S).sum(), leaves)

    ref = grads("recurrent")
    for backend, chunk in (("masked", 64), ("chunk", 4), ("chunk", 16)):
        for name, got, want in zip([*second, "S0"], grads(backend, chunk), ref):
            assert rel(got, want) <= TOL, f"{backend}/{chunk}: d{name} differs by {rel(got, want):.3g}"


@pytest.mark.parametrize("backend", ["masked", "chunk"])
@pytest.mark.parametrize("rule", RULES)
def test_zero_keys_with_eps_zero_stay_finite(rule: str, backend: str) -> None:
    """Keys exactly zero, eps = 0 and λ = 0 in places: η's denominator is 0 there, the step is a no-op."""
    gen = generator("zero", rule, backend)
    x = inputs(gen, rule, 9)
    x["k"][:, 2:6] = 0.0
    x["k"][1] = 0.0
    x["lam"][:, ::2] = 0.0
    x = {name: t.requires_grad_(True) for name, t in x.items()}
    for alignment, timing in itertools.product(ALIGNMENTS, TIMINGS):
        opts = dict(rule=rule, window=3, eps=0.0, alignment=alignment, timing=timing)
        ref_out, ref_final = run("recurrent", x, None, **opts)
        out, final = run(backend, x, None, chunk_size=4, **opts)
        assert_same(out, final, ref_out, ref_final, f"{alignment}/{timing}")
        grads = torch.autograd.grad(out.sum() + final.S.sum(), list(x.values()))
        for name, g in zip(x, grads):
            assert torch.isfinite(g).all(), f"{alignment}/{timing}: d{name} is not finite"
