"""backend="triton" for falcon-1 and falcon-2 against the float64 recurrent oracle: outputs, final state and every
gradient (q, k, v, β, λ, the initial S and last key), at tiny shapes under Triton's interpreter on a CPU.

Every buffer the kernels fill starts as NaN, so a row a kernel forgets to write cannot pass.
"""

from __future__ import annotations

import zlib

import pytest
import torch
import triton
import triton.language as tl

from falcon_lab.kernels import FastWeightState, fast_weight_rule
from falcon_lab.kernels.common import triton_helpers
from falcon_lab.kernels.regression.triton_f1 import unit_lower_inverse
from tests.rules_util import gain

RULES = ("falcon-1", "falcon-2")
D = 16  # tl.dot needs sizes of at least 16
# the interpreter multiplies in exact fp32; a GPU runs three tf32 passes
TOL = 1e-3 if torch.cuda.is_available() else 1e-4
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(autouse=True)
def poisoned_buffers(monkeypatch: pytest.MonkeyPatch) -> None:
    def nan_buffer(*shape: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)

    monkeypatch.setattr(triton_helpers, "new_buffer", nan_buffer)


def rel(out: torch.Tensor | None, ref: torch.Tensor | None) -> float:
    """RMS(ref − out) / RMS(ref); a gradient autograd never reached counts as zero."""
    if ref is None:
        ref = torch.zeros_like(out)
    if out is None:
        out = torch.zeros_like(ref)
    out, ref = out.detach().double().cpu(), ref.detach().double().cpu()
    return ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def draw(rule: str, B: int, T: int, H: int, seed: int, beta=(0.1, 1.9), lam=(0.0, 0.5), d: int = D,
         spread: float | None = None):
    """q, v ~ N(0, 1); keys of squared norm about 1 (or a unit direction plus noise of norm about ``spread``);
    β and λ uniform in the given ranges (float64)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, d, generator=g)
    k = torch.randn(B, T, H, d, generator=g) / d ** 0.5
    if spread is not None:
        direction = torch.randn(d, generator=g)
        k = direction / direction.norm() + spread * k
    v = torch.randn(B, T, H, d, generator=g)
    shape = (B, T, H, d) if rule == "falcon-2" else (B, T, H)
    b = beta[0] + (beta[1] - beta[0]) * torch.rand(shape, generator=g)
    lm = lam[0] + (lam[1] - lam[0]) * torch.rand(B, T, H, generator=g)
    return [t.double() for t in (q, k, v, b, lm)]


def op(xs, normalize: bool = True, **opts):
    """The op on (q, k, v, β, λ), or on (q, k, v, η, λ) without normalisation (η given as ``eta``)."""
    q, k, v, b, lam = xs
    return fast_weight_rule(q, k, v, lam=lam, **gain(b, normalize), **opts)


def start_state(kind: str, rule: str, N: int, H: int, seed: int, **opts):
    """None (fresh), a bare S (fresh from S), or the float64 state after a first recurrent segment."""
    g = torch.Generator().manual_seed(seed + 1000)
    if kind == "fresh":
        return None
    if kind == "S":
        return torch.randn(N, H, D, D, generator=g, dtype=torch.float64)
    first = draw(rule, N, 6, H, seed + 2000)
    _, st = op(first, rule=rule, backend="recurrent", output_final_state=True, **opts)
    return st


def leaves(state, dtype: torch.dtype):
    """The state as fresh leaves of ``dtype`` (S and the last key take gradients) and the list of leaves."""
    if state is None:
        return None, []
    if isinstance(state, torch.Tensor):
        S = state.to(dtype).requires_grad_()
        return S, [S]
    S = state.S.to(dtype).requires_grad_()
    lk = state.last_key.to(dtype).requires_grad_()
    return FastWeightState(S, lk, state.x_tail.to(dtype), state.v_tail.to(dtype), state.tail_mask), [S, lk]


def run(rule: str, inputs, state, dtype: torch.dtype, backend: str, seed: int, cu_seqlens=None, **opts):
    """Outputs, final state and the gradients of a fixed random loss on them."""
    device = DEVICE if backend == "triton" else "cpu"
    xs = [t.to(device=device, dtype=dtype).requires_grad_() for t in inputs]
    st, st_leaves = leaves(state, dtype)
    if st is not None:
        st = st.to(device) if isinstance(st, torch.Tensor) else FastWeightState(*(t.to(device) for t in st))
    cu = None if cu_seqlens is None else cu_seqlens.to(device)
    o, fin = op(xs, rule=rule, backend=backend, initial_state=st, output_final_state=True, cu_seqlens=cu, **opts)
    g = torch.Generator().manual_seed(seed + 3000)
    go = torch.randn(o.shape, generator=g, dtype=torch.float64).to(device=device, dtype=o.dtype)
    gS = torch.randn(fin.S.shape, generator=g, dtype=torch.float64).to(device=device, dtype=fin.S.dtype)
    gk = torch.randn(fin.last_key.shape, generator=g, dtype=torch.float64).to(device, fin.last_key.dtype)
    ((o * go).sum() + (fin.S * gS).sum() + (fin.last_key * gk).sum()).backward()
    return o, fin, [t.grad for t in xs + st_leaves]


def check(rule: str, T: int = 23, B: int = 2, H: int = 2, seed: int = 0, state: str = "continue",
          chunk_size: int = 16, draw_opts: dict | None = None, cu_seqlens=None, **opts) -> None:
    inputs = draw(rule, B, T, H, seed, **(draw_opts or {}))
    N = B if cu_seqlens is None else cu_seqlens.numel() - 1
    st = start_state(state, rule, N, H, seed, **opts)
    o, fin, grads = run(rule, inputs, st, torch.float32, "triton", seed, cu_seqlens, chunk_size=chunk_size,
                        **opts)
    o_ref, fin_ref, grads_ref = run(rule, inputs, st, torch.float64, "recurrent", seed, cu_seqlens, **opts)
    assert not torch.isnan(o).any() and not torch.isnan(fin.S).any()
    assert rel(o, o_ref) <= TOL, "o"
    assert rel(fin.S, fin_ref.S) <= TOL, "final S"
    assert rel(fin.last_key, fin_ref.last_key) <= TOL, "final last key"
    names = ["q", "k", "v", "beta", "lam", "S0", "last_key"]
    for name, gr, gr_ref in zip(names, grads, grads_ref):
        assert gr is None or not torch.isnan(gr).any(), f"d{name} has NaN"
        assert rel(gr, gr_ref) <= TOL, f"d{name}: {rel(gr, gr_ref):.2e}"


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("alignment", ["shifted", "same_time"])
@pytest.mark.parametrize("timing", ["raw", "rbw"])
def test_matches_oracle_continuing(rule, alignment, timing):
    """Odd T over three chunks, continuing from the state of a first segment."""
    check(rule, T=37, alignment=alignment, timing=timing, seed=zlib.crc32(f"{rule}{alignment}{timing}".encode()))


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("state", ["fresh", "S"])
def test_fresh_sequences(rule, state):
    """A fresh sequence from S = 0 or from a given S: the first shifted pair is no pair."""
    check(rule, T=21, state=state, seed=7)


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("regime", ["lam0", "clamp", "beta_above_1", "coupled", "ctx_eta", "eps0"])
def test_regimes(rule, regime):
    draw_opts, opts = {}, {}
    if regime == "lam0":
        draw_opts = dict(lam=(0.0, 0.0))
    elif regime == "clamp":  # η λ → β > 1 − ε_γ once λ ≫ ‖x‖²: the carry floor binds
        draw_opts = dict(beta=(1.0, 1.9), lam=(5.0, 60.0))
    elif regime == "beta_above_1":
        draw_opts = dict(beta=(1.2, 1.95), lam=(0.0, 0.1))
    elif regime == "coupled":
        draw_opts, opts = dict(lam=(0.0, 3.0)), dict(scale_coupled_ridge=True)
    elif regime == "ctx_eta":  # the step size η itself, given as eta
        draw_opts, opts = dict(beta=(0.05, 0.6), lam=(0.0, 4.0)), dict(normalize=False)
    else:
        opts = dict(eps=0.0)
    check(rule, T=21, B=1, seed=11, draw_opts=draw_opts, **opts)  # batch rows: test_matches_oracle_continuing


def test_clamp_regime_binds():
    """The clamp case above does reach η λ > 1 − ε_γ."""
    _, k, _, beta, lam = draw("falcon-1", 1, 21, 2, 11, beta=(1.0, 1.9), lam=(5.0, 60.0))
    energy = (k[:, :-1] ** 2).sum(-1)
    eta = beta[:, 1:] / (energy + lam[:, 1:] + 1e-6)
    assert ((eta * lam[:, 1:]) > 1 - 1e-3).any()


@pytest.mark.parametrize("rule,chunk_size,T", [("falcon-1", 32, 40), ("falcon-1", 64, 130), ("falcon-1", 16, 1),
                                               ("falcon-2", 16, 1), ("falcon-1", 64, 7)])
def test_chunk_sizes_and_short_sequences(rule, chunk_size, T):
    """Chunks of 32 and 64 (the UT transform's inverse in two and four blocks of 16), T of one token."""
    check(rule, T=T, B=1, H=1, chunk_size=chunk_size, seed=3)


@triton.jit
def _inverse_kernel(L_ptr, A_ptr, C: tl.constexpr, DOUBLING: tl.constexpr):
    r = tl.arange(0, C)
    A = unit_lower_inverse(tl.load(L_ptr + r[:, None] * C + r[None, :]), C, "ieee", DOUBLING)
    tl.store(A_ptr + r[:, None] * C + r[None, :], A)


@pytest.mark.parametrize("C", [2, 4, 16, 32, 64, 128])
@pytest.mark.parametrize("doubling", [False, True])
def test_the_unit_lower_inverse_in_either_form(C: int, doubling: bool) -> None:
    """``unit_lower_inverse`` of a strictly lower tile against float64's inverse, by substitution (chunks of 16 to
    64) and by doubling (any power of two up to 128), with entries as large as the UT transform's (|L| up to 2)."""
    if not doubling and C not in (16, 32, 64):
        pytest.skip("substitution takes chunks of 16, 32 and 64")
    g = torch.Generator().manual_seed(C)
    L = ((torch.rand(C, C, generator=g) * 4 - 2) / C ** 0.5).tril(-1).to(DEVICE)
    A = torch.full_like(L, float("nan"))
    _inverse_kernel[(1,)](L, A, C=C, DOUBLING=doubling)
    exact = torch.linalg.inv(torch.eye(C, dtype=torch.float64) + L.double().cpu())
    assert rel(A.double().cpu(), exact) <= 1e-6


@pytest.mark.parametrize("rule,chunk_size,T", [("falcon-1", 16, 37), ("falcon-1", 32, 40), ("falcon-1", 64, 130)])
def test_the_inverse_by_substitution_matches_the_oracle(rule: str, chunk_size: int, T: int,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The UT transform's inverse by substitution (``triton_launch.INVERSE``; doubling, the default, everywhere
    else) in the whole rule: forward, final state and every gradient against the float64 recurrence, at chunks of
    16, 32 and 64."""
    from falcon_lab.kernels.regression import triton_launch

    monkeypatch.setattr(triton_launch, "INVERSE", "substitution")
    check(rule, T=T, B=1, H=2, chunk_size=chunk_size, seed=5)


def test_launch_overrides_from_the_environment_and_their_gradients(monkeypatch: pytest.MonkeyPatch) -> None:
    """LAB_LAUNCH's form (``parse_launch``) sets a kernel's blocks and warps, refusing what is not one in one line;
    f1_grad in blocks of half the head (two of each loop) still gives the oracle's gradients."""
    from falcon_lab.kernels.regression import triton_launch
    from falcon_lab.kernels.common.checks import SettingError

    got = triton_launch.parse_launch(" f1_grad:BK=8,BV=8 ; f1_prep:num_warps=4;")
    assert got == {"f1_grad": {"BK": 8, "BV": 8}, "f1_prep": {"num_warps": 4}}
    for bad, said in (("f9:BK=8", "unknown kernel 'f9'"), ("f1_grad:BQ=8", "got 'BQ=8'"),
                      ("f1_grad:BK=0", "got 'BK=0'"), ("f1_grad:BK", "got 'BK'")):
        with pytest.raises(SettingError, match=said):
            triton_launch.parse_launch(bad)
    monkeypatch.setattr(triton_launch, "LAUNCH_OVERRIDES", {"f1_grad": {"BK": 8, "BV": 8}})
    assert triton_launch.launch_config("f1_grad", 16, 16, 16)["BK"] == 8
    check("falcon-1", T=37, B=1, H=2, chunk_size=16, seed=9, draw_opts={"d": 16})


@pytest.mark.parametrize("rule", RULES)
def test_nearly_parallel_keys(rule):
    """Keys almost along one direction and β near 2: the chunk systems are far from the identity."""
    check(rule, T=40, B=1, chunk_size=32, seed=31, draw_opts=dict(beta=(1.7, 1.95), lam=(0.0, 0.05), spread=0.05))


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("state", ["fresh", "continue"])
def test_packed_sequences(rule, state):
    """cu_seqlens: sequences of 5, 17, 1 and 13 tokens, each from its own state row."""
    cu = torch.tensor([0, 5, 22, 23, 36], dtype=torch.int32)
    check(rule, T=36, B=1, state=state, cu_seqlens=cu, seed=5)


@pytest.mark.parametrize("rule", RULES)
def test_two_segments_equal_one_pass(rule):
    """The triton state handed from one segment to the next continues the sequence exactly."""
    inputs = draw(rule, 2, 30, 2, 13)
    ref, _ = fast_weight_rule(*inputs, rule=rule, backend="recurrent")
    first = [t[:, :17].float() for t in inputs]
    second = [t[:, 17:].float() for t in inputs]
    o1, st = fast_weight_rule(*first, rule=rule, backend="triton", chunk_size=16, output_final_state=True)
    o2, _ = fast_weight_rule(*second, rule=rule, backend="triton", chunk_size=16, initial_state=st)
    assert rel(torch.cat([o1, o2], 1), ref) <= TOL


def test_falcon2_with_equal_gains_is_falcon1():
    q, k, v, beta, lam = (t.float() for t in draw("falcon-1", 1, 19, 2, 17))
    o1, _ = fast_weight_rule(q, k, v, beta, lam, rule="falcon-1", backend="triton", chunk_size=16)
    o2, _ = fast_weight_rule(q, k, v, beta, lam, rule="falcon-2", backend="triton")
    assert rel(o2, o1) <= TOL


@pytest.mark.parametrize("rule", RULES)
def test_zero_keys_with_eps0_stay_finite(rule):
    """ε = 0, λ = 0 and all-zero keys: every denominator is 0, η := 0, no NaN or inf anywhere."""
    q, k, v, beta, lam = draw(rule, 1, 19, 2, 19, lam=(0.0, 0.0))
    xs = [t.float().requires_grad_() for t in (q, torch.zeros_like(k), v, beta, lam)]
    o, fin = fast_weight_rule(*xs, rule=rule, backend="triton", chunk_size=16, eps=0.0, output_final_state=True)
    (o.sum() + fin.S.sum()).backward()
    for t in [o, fin.S] + [x.grad for x in xs]:
        assert torch.isfinite(t).all()
    assert o.abs().max() == 0  # nothing is ever written


def test_rejects_unsupported_inputs():
    q, k, v, beta, lam = draw("falcon-1", 1, 5, 1, 0)
    with pytest.raises(ValueError, match="float64"):
        fast_weight_rule(q, k, v, beta, lam, rule="falcon-1", backend="triton")
    with pytest.raises(ValueError, match="chunk_size"):
        fast_weight_rule(*(t.float() for t in (q, k, v, beta, lam)), rule="falcon-1", backend="triton",
                         chunk_size=24)


@pytest.mark.gpu
@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-3), (torch.bfloat16, 1e-2)])
@pytest.mark.parametrize("inverse", ["substitution", "doubling"])
def test_gpu_sizes(rule, dtype, tol, inverse, monkeypatch: pytest.MonkeyPatch):
    """Dk = Dv = 64 over 300 tokens (four chunks of 64, the last one short) on a GPU, in fp32 and bf16, the UT
    transform's inverse in either form."""
    from falcon_lab.kernels.regression import triton_launch

    monkeypatch.setattr(triton_launch, "INVERSE", inverse)
    inputs = [t.to(dtype).double() for t in draw(rule, 2, 300, 2, 23, d=64)]  # the reference sees the rounding
    o, fin, grads = run(rule, inputs, None, dtype, "triton", 23, chunk_size=64)
    o_ref, fin_ref, grads_ref = run(rule, inputs, None, torch.float64, "recurrent", 23)
    assert rel(o, o_ref) <= tol and rel(fin.S, fin_ref.S) <= tol
    for gr, gr_ref in zip(grads, grads_ref):
        assert rel(gr, gr_ref) <= tol


@pytest.mark.parametrize("rule", ["falcon-1", "falcon-2"])
def test_kept_forward_quantities_give_the_recomputed_gradients(rule: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """KEEP_FOR_BACKWARD: the backward takes the UT transform, U and the chunk states from the forward and
    launches neither a second UT transform and state pass (falcon-1) nor a second solve (falcon-2); the
    gradients are those of the recomputing backward."""
    from falcon_lab.kernels.regression import triton_launch as launch

    calls: dict[str, int] = {}

    class Counted:
        def __init__(self, name: str, kernel) -> None:
            self.name, self.kernel = name, kernel

        def __getitem__(self, grid):
            calls[self.name] = calls.get(self.name, 0) + 1
            return self.kernel[grid]

    for name in ("f1_prep_kernel", "f1_state_kernel", "f2_fwd_kernel"):
        monkeypatch.setattr(launch, name, Counted(name, getattr(launch, name)))
    inputs = draw(rule, 2, 37, 2, seed=5)
    state = start_state("state", rule, 2, 2, seed=5)
    results = {}
    for keep in (False, True):
        monkeypatch.setattr(launch, "KEEP_FOR_BACKWARD", keep)
        calls.clear()
        results[keep] = run(rule, inputs, state, torch.float32, "triton", seed=5, chunk_size=16)
        first = "f2_fwd_kernel" if rule == "falcon-2" else "f1_state_kernel"
        assert calls[first] == (1 if keep else 2), (keep, calls)
        if rule == "falcon-1":
            assert calls["f1_prep_kernel"] == (1 if keep else 2), (keep, calls)
    (o0, fin0, g0), (o1, fin1, g1) = results[False], results[True]
    assert rel(o1, o0) == 0 and rel(fin1.S, fin0.S) == 0
    for a, b in zip(g1, g0):
        assert rel(a, b) < 1e-6


F2_SOLVE_CASES = {
    "continuing-shifted-raw": dict(T=37, alignment="shifted", timing="raw"),
    "continuing-same_time-rbw": dict(T=37, alignment="same_time", timing="rbw"),
    "packed": dict(T=36, B=1, cu_seqlens=torch.tensor([0, 5, 22, 23, 36], dtype=torch.int32)),
    "clamp": dict(T=21, draw_opts=dict(beta=(1.0, 1.9), lam=(5.0, 60.0))),
    "ctx_eta-coupled": dict(T=21, draw_opts=dict(beta=(0.05, 0.6), lam=(0.0, 4.0)), normalize=False,
                            scale_coupled_ridge=True),
    "nearly-parallel-keys": dict(T=40, B=1, draw_opts=dict(beta=(1.7, 1.95), lam=(0.0, 0.05), spread=0.05)),
}


# every case for the substitution (the default is the inverses, which every other falcon-2 test takes); two for
# the outputs' pass alone
F2_SOLVE_RUNS = [(case, "sequential") for case in F2_SOLVE_CASES] + [("continuing-same_time-rbw", "outputs-apart"),
                                                                      ("packed", "outputs-apart")]


@pytest.mark.parametrize("case,solve", F2_SOLVE_RUNS)
def test_falcon2_solve_forms(case: str, solve: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """F2_SOLVE: falcon-2's 16-step substitution walked by the sequential pass, and its outputs from a parallel
    pass after it, held to the float64 oracle like the default (the per-column inverses formed by a parallel pass
    before the sequential one and applied by it)."""
    from falcon_lab.kernels.regression import triton_launch as launch

    monkeypatch.setattr(launch, "F2_SOLVE", solve)
    monkeypatch.setattr(launch, "KEEP_FOR_BACKWARD", case != "packed")  # one case recomputes U and h backward
    check("falcon-2", seed=zlib.crc32(case.encode()), **F2_SOLVE_CASES[case])


def test_falcon2_unknown_solve_form_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from falcon_lab.kernels.regression import triton_launch as launch

    monkeypatch.setattr(launch, "F2_SOLVE", "parallel")
    with pytest.raises(ValueError, match="F2_SOLVE='parallel'; accepted: sequential, outputs-apart, inverses"):
        run("falcon-2", draw("falcon-2", 1, 5, 1, 0), None, torch.float32, "triton", 0)


@pytest.mark.gpu
@pytest.mark.parametrize("solve", ["outputs-apart", "inverses"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-3), (torch.bfloat16, 1e-2)])
def test_falcon2_solve_forms_gpu_sizes(solve, d, dtype, tol, monkeypatch: pytest.MonkeyPatch):
    """F2_SOLVE's other forms at the bench's head sizes on a GPU: 300 tokens (nineteen chunks of 16)."""
    from falcon_lab.kernels.regression import triton_launch as launch

    monkeypatch.setattr(launch, "F2_SOLVE", solve)
    inputs = [t.to(dtype).double() for t in draw("falcon-2", 2, 300, 2, 29, d=d)]
    o, fin, grads = run("falcon-2", inputs, None, dtype, "triton", 29)
    o_ref, fin_ref, grads_ref = run("falcon-2", inputs, None, torch.float64, "recurrent", 29)
    assert rel(o, o_ref) <= tol and rel(fin.S, fin_ref.S) <= tol
    for gr, gr_ref in zip(grads, grads_ref):
        assert rel(gr, gr_ref) <= tol
