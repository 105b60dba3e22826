"""Decayed linear attention: the chunk backend against the recurrent oracle (float64), continuation across
segments, the shifted/RBW conventions, gradients, strong decays, the falcon-1a reading, and bad input."""

from __future__ import annotations

import zlib

import pytest
import torch

from falcon_lab.kernels import fast_weight_rule, linear_attention
from falcon_lab.kernels.common.state import FastWeightState, fresh_state

F64 = torch.float64
TOL = 1e-10
ALIGNMENTS = ("same_time", "shifted")
TIMINGS = ("raw", "rbw")
FIELDS = ("S", "last_key", "x_tail", "v_tail", "tail_mask")
B, H, DK, DV = 2, 2, 3, 4


def rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out − ref|| / max(||ref||, tiny)."""
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm().clamp(min=1e-300)).item()


def generator(*case: object) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(repr(case).encode()))


def inputs(gen: torch.Generator, T: int, dtype: torch.dtype = F64) -> dict[str, torch.Tensor]:
    """q, k, v and log decays g <= 0 mixing no decay (g = 0), mild and strong decays."""
    rand = lambda *s: torch.randn(*s, generator=gen, dtype=F64)  # noqa: E731
    strength = torch.tensor([0.0, 0.3, 4.0], dtype=F64)[torch.randint(0, 3, (B, T, H), generator=gen)]
    x = {"q": rand(B, T, H, DK), "k": rand(B, T, H, DK), "v": rand(B, T, H, DV),
         "log_decay": -strength * torch.rand(B, T, H, generator=gen, dtype=F64)}
    return {name: t.to(dtype) for name, t in x.items()}


def segment(x: dict[str, torch.Tensor], start: int, stop: int | None = None) -> dict[str, torch.Tensor]:
    return {name: t[:, start:stop] for name, t in x.items()}


def assert_same(out, final, ref_out, ref_final, what: str) -> None:
    assert rel(out, ref_out) <= TOL, f"{what}: outputs differ by {rel(out, ref_out):.3g}"
    for field in FIELDS:
        got, want = getattr(final, field), getattr(ref_final, field)
        assert got.shape == want.shape, f"{what}: final {field} shape {tuple(got.shape)}"
        assert torch.equal(got, want) if field == "tail_mask" else rel(got, want) <= TOL, \
            f"{what}: final {field} differs"


@pytest.mark.parametrize("T", [1, 7, 63, 130])
@pytest.mark.parametrize("timing", TIMINGS)
@pytest.mark.parametrize("alignment", ALIGNMENTS)
def test_chunk_matches_recurrent(alignment: str, timing: str, T: int) -> None:
    gen = generator(alignment, timing, T)
    x = inputs(gen, T)
    S0 = torch.randn(B, H, DK, DV, generator=gen, dtype=F64)
    opts = dict(scale=0.6, alignment=alignment, timing=timing, initial_state=S0, output_final_state=True)
    ref_out, ref_final = linear_attention(**x, backend="recurrent", **opts)
    for chunk in (1, 4, 16, 64):
        out, final = linear_attention(**x, backend="chunk", chunk_size=chunk, **opts)
        assert_same(out, final, ref_out, ref_final, f"chunk_size={chunk}")


@pytest.mark.parametrize("split", [1, 6, 40])
@pytest.mark.parametrize("timing", TIMINGS)
@pytest.mark.parametrize("alignment", ALIGNMENTS)
def test_two_segments_equal_one_pass(alignment: str, timing: str, split: int) -> None:
    """Handing the state over (S and, for shifted, the last key) continues exactly, in either backend."""
    x = inputs(generator("segments", alignment, timing, split), 45)
    opts = dict(scale=0.6, alignment=alignment, timing=timing, output_final_state=True)
    ref_out, ref_final = linear_attention(**x, backend="recurrent", **opts)
    for first, second in (("recurrent", "chunk"), ("chunk", "chunk"), ("chunk", "recurrent")):
        out1, mid = linear_attention(**segment(x, 0, split), backend=first, chunk_size=8, **opts)
        out2, final = linear_attention(**segment(x, split), backend=second, chunk_size=8, initial_state=mid,
                                       **opts)
        assert_same(torch.cat([out1, out2], dim=1), final, ref_out, ref_final, f"{first} then {second}")


@pytest.mark.parametrize("backend", ["recurrent", "chunk"])
def test_fresh_shifted_first_token_writes_nothing(backend: str) -> None:
    """Shifted and fresh: x_1 = 0, so o_1 reads only the decayed S_0 (RAW) or S_0 itself (RBW)."""
    gen = generator("boundary", backend)
    x = inputs(gen, 5)
    S0 = torch.randn(B, H, DK, DV, generator=gen, dtype=F64)
    read = torch.einsum("bhkv,bhk->bhv", S0, x["q"][:, 0])
    raw, _ = linear_attention(**x, scale=0.5, alignment="shifted", backend=backend, initial_state=S0)
    rbw, _ = linear_attention(**x, scale=0.5, alignment="shifted", timing="rbw", backend=backend,
                              initial_state=S0)
    assert rel(raw[:, 0], 0.5 * x["log_decay"][:, 0, :, None].exp() * read) <= TOL
    assert rel(rbw[:, 0], 0.5 * read) <= TOL


@pytest.mark.parametrize("timing", TIMINGS)
@pytest.mark.parametrize("alignment", ALIGNMENTS)
def test_is_falcon_1a_with_given_step_sizes(alignment: str, timing: str) -> None:
    """falcon-1a given its step sizes (eta=) is linear attention with v ← η v and g = log(1 − min(ηλ, 1 − ε_γ))."""
    gen = generator("falcon-1a", alignment, timing)
    x = inputs(gen, 20)
    eta = 0.05 + 0.5 * torch.rand(B, 20, H, generator=gen, dtype=F64)
    lam = 3.0 * torch.rand(B, 20, H, generator=gen, dtype=F64)
    S0 = torch.randn(B, H, DK, DV, generator=gen, dtype=F64)
    ref, ref_final = fast_weight_rule(x["q"], x["k"], x["v"], lam=lam, eta=eta, rule="falcon-1a",
                                      alignment=alignment, timing=timing, initial_state=S0,
                                      output_final_state=True)
    g = torch.log(1.0 - torch.clamp(eta * lam, max=1.0 - 1e-3))
    if alignment == "shifted":
        g[:, 0] = 0.0  # the fresh boundary is not a pair: η_1 = 0, so γ_1 = 1
    out, final = linear_attention(x["q"], x["k"], eta[..., None] * x["v"], g, alignment=alignment,
                                  timing=timing, initial_state=S0, output_final_state=True, chunk_size=6)
    assert_same(out, final, ref, ref_final, "falcon-1a")


@pytest.mark.parametrize("timing", TIMINGS)
@pytest.mark.parametrize("alignment", ALIGNMENTS)
def test_gradients_match_recurrent(alignment: str, timing: str) -> None:
    """d/d(q, k, v, log_decay, S_0, last key) of outputs and final S, continuing from a state."""
    gen = generator("grad", alignment, timing)
    x = {name: t.requires_grad_(True) for name, t in inputs(gen, 13).items()}
    S0 = torch.randn(B, H, DK, DV, generator=gen, dtype=F64, requires_grad=True)
    last_key = torch.randn(B, H, DK, generator=gen, dtype=F64, requires_grad=True)
    state = fresh_state(B, H, DK, DV, 1, F64, "cpu", S0)._replace(last_key=last_key)
    leaves = [*x.values(), S0, last_key]
    co_o = torch.randn(B, 13, H, DV, generator=gen, dtype=F64)
    co_S = torch.randn(B, H, DK, DV, generator=gen, dtype=F64)

    def grads(backend: str, chunk: int):
        out, final = linear_attention(**x, scale=0.7, alignment=alignment, timing=timing, backend=backend,
                                      chunk_size=chunk, initial_state=state, output_final_state=True)
        return torch.autograd.grad((out * co_o).sum() + (final.S * co_S).sum(), leaves, allow_unused=True)

    ref = grads("recurrent", 1)
    for chunk in (4, 16):
        for name, got, want in zip([*x, "S0", "last_key"], grads("chunk", chunk), ref):
            if want is None:  # same_time never reads the last key
                assert got is None or got.abs().max() == 0, f"d{name} should vanish"
                continue
            assert rel(got, want) <= TOL, f"chunk_size={chunk}: d{name} differs by {rel(got, want):.3g}"


def test_strong_decays_stay_finite_and_exact() -> None:
    """Mamba-2-like decays (g down to −200) and exact zeros of k: finite outputs and gradients, still exact."""
    gen = generator("strong")
    x = inputs(gen, 70)
    x["log_decay"] = x["log_decay"] * 50.0
    x["k"][:, 10:20] = 0.0
    x = {name: t.requires_grad_(True) for name, t in x.items()}
    ref, _ = linear_attention(**x, backend="recurrent")
    out, _ = linear_attention(**x, chunk_size=16)
    assert rel(out, ref) <= TOL
    grads = torch.autograd.grad(out.square().sum(), list(x.values()))
    assert all(torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_low_precision_inputs(dtype: torch.dtype) -> None:
    """Outputs come back in the input dtype; the state runs in float32."""
    x = inputs(generator("dtype", str(dtype)), 33)
    ref, _ = linear_attention(**x, backend="recurrent")
    out, final = linear_attention(**{n: t.to(dtype) for n, t in x.items()}, chunk_size=8,
                                  output_final_state=True)
    assert out.dtype == dtype and final.S.dtype == torch.float32
    assert rel(out, ref) <= (1e-5 if dtype == torch.float32 else 3e-2)


def _bad_calls():
    x = inputs(generator("bad"), 5)
    q, k, v, g = x["q"], x["k"], x["v"], x["log_decay"]
    window_state = fresh_state(B, H, DK, DV, 4, F64, "cpu")
    return [
        (dict(q=q[0], k=k, v=v, log_decay=g), "q must be a 4-D"),
        (dict(q=q[:, :0], k=k[:, :0], v=v[:, :0], log_decay=g[:, :0]), "T = 0"),
        (dict(q=q, k=k[..., :2], v=v, log_decay=g), "k has shape"),
        (dict(q=q, k=k, v=v[:, :4], log_decay=g), "v has shape"),
        (dict(q=q, k=k, v=v, log_decay=g[..., None]), "log_decay has shape"),
        (dict(q=q, k=k, v=v, log_decay=g.long()), "log_decay must be a floating-point"),
        (dict(q=q, k=k.float(), v=v, log_decay=g), "share one dtype"),
        (dict(q=q, k=k, v=v, log_decay=g, alignment="late"), "alignment="),
        (dict(q=q, k=k, v=v, log_decay=g, timing="soon"), "timing="),
        (dict(q=q, k=k, v=v, log_decay=g, backend="fused"), "backend="),
        (dict(q=q, k=k, v=v, log_decay=g, chunk_size=0), "chunk_size"),
        (dict(q=q, k=k, v=v, log_decay=g, scale="1"), "scale"),
        (dict(q=q, k=k, v=v, log_decay=g, initial_state=torch.zeros(B, H, DV, DK)), "initial_state has shape"),
        (dict(q=q, k=k, v=v, log_decay=g, initial_state=window_state), "initial_state.x_tail"),
        (dict(q=q, k=k, v=v, log_decay=g, initial_state=(1, 2)), "initial_state must be"),
    ]


@pytest.mark.parametrize("case", range(len(_bad_calls())))
def test_bad_input_names_the_argument(case: int) -> None:
    kwargs, message = _bad_calls()[case]
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        linear_attention(**kwargs)


def test_state_type_is_the_rules_state() -> None:
    """The final state is a FastWeightState with an empty tail, accepted back as initial_state."""
    x = inputs(generator("state"), 4)
    _, final = linear_attention(**x, output_final_state=True)
    assert isinstance(final, FastWeightState) and final.x_tail.shape == (B, H, 0, DK)
    assert final.tail_mask.shape == (B, 0)
    out, _ = linear_attention(**x, initial_state=final)
    assert out.shape == (B, 4, H, DV)
