"""backend="triton" for falcon-1a/2a against the float64 recurrent oracle: outputs, final state and every
gradient (q, k, v, beta, lam, initial S). Without CUDA the kernels run in Triton's interpreter at tiny sizes.

Every buffer the kernels write is allocated full of NaN here, so an element a kernel fails to write shows.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from falcon_lab.kernels import FastWeightState, fast_weight_rule
from falcon_lab.kernels.common import triton_helpers
from tests.rules_util import gain

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# the interpreter does every dot in fp32; a GPU runs fp32 dots at full precision too ("ieee"). On the CPU the
# summation order of the interpreter's dots varies from run to run (with the threads the machine gives it):
# dβ (a sum over every element of a chunk) has been seen at 1.2e-5 and dk at 3.1e-5 (CI, under load), once
# each in many runs: 1e-4 keeps the CPU bound 10 times inside the 1e-3 of the GPU's
TOL_FP32 = 1e-4 if DEVICE == "cpu" else 1e-3
NAMES = ("o", "S", "dq", "dk", "dv", "dbeta", "dlam", "dS0")


@pytest.fixture(autouse=True)
def poisoned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(triton_helpers, "new_buffer", lambda *shape, dtype, device: torch.full(
        shape, float("nan"), dtype=dtype, device=device))


def inputs(rule: str, B: int, T: int, H: int, D: int, seed: int, lam_scale: float = 1.0) -> dict[str, Tensor]:
    g = torch.Generator().manual_seed(seed)
    beta_shape = (B, T, H, D) if rule == "falcon-2a" else (B, T, H)
    return {
        "q": torch.randn(B, T, H, D, generator=g),
        "k": torch.randn(B, T, H, D, generator=g) / D ** 0.5,
        "v": torch.randn(B, T, H, D, generator=g),
        "beta": 0.05 + 1.9 * torch.rand(*beta_shape, generator=g),
        "lam": lam_scale * torch.rand(B, T, H, generator=g),
        "S0": torch.randn(B, H, D, D, generator=g) / D,
        "w": torch.randn(B, T, H, D, generator=g),  # cotangent of o
        "wS": torch.randn(B, H, D, D, generator=g),  # cotangent of the final S
    }


def run(x: dict[str, Tensor], backend: str, dtype: torch.dtype, state: FastWeightState | None = None,
        **opts) -> list[Tensor]:
    """Outputs, final S and the gradients of <o, w> + <S, wS> with respect to the inputs and initial S."""
    leaves = [x[n].detach().to(DEVICE, dtype).clone().requires_grad_(True) for n in ("q", "k", "v", "beta", "lam")]
    sdtype = torch.float64 if dtype == torch.float64 else torch.float32
    S0 = (x["S0"] if state is None else state.S).detach().to(DEVICE, sdtype).clone().requires_grad_(True)
    init = S0 if state is None else FastWeightState(S0, *(t.to(DEVICE) for t in state[1:]))
    if state is not None:
        init = FastWeightState(S0, init.last_key.to(sdtype), init.x_tail.to(sdtype), init.v_tail.to(sdtype),
                               init.tail_mask)
    normalize = opts.pop("normalize", True)
    q, k, v, beta, lam = leaves
    o, final = fast_weight_rule(q, k, v, lam=lam, **gain(beta, normalize), backend=backend, initial_state=init,
                                output_final_state=True, **opts)
    loss = (o.double() * x["w"].to(DEVICE, torch.float64)).sum() + \
        (final.S.double() * x["wS"].to(DEVICE, torch.float64)).sum()
    loss.backward()
    return [o, final.S] + [t.grad for t in leaves] + [S0.grad]


def rms_rel(out: Tensor, ref: Tensor) -> float:
    out, ref = out.double().cpu(), ref.double().cpu()
    return ((out - ref).pow(2).mean().sqrt() / ref.pow(2).mean().sqrt().clamp(min=1e-30)).item()


def check(out: list[Tensor], ref: list[Tensor], tol: float) -> None:
    for name, a, b in zip(NAMES, out, ref):
        assert a is not None, f"{name}: no gradient"
        assert not torch.isnan(a).any(), f"{name}: NaN (an element was not written)"
        err = rms_rel(a, b)
        assert err <= tol, f"{name}: relative RMS error {err:.2e} > {tol:.0e}"


@pytest.mark.parametrize("rule", ["falcon-1a", "falcon-2a"])
@pytest.mark.parametrize("timing", ["raw", "rbw"])
@pytest.mark.parametrize("alignment", ["shifted", "same_time"])
def test_forward_and_gradients_match_the_oracle(rule: str, timing: str, alignment: str) -> None:
    x = inputs(rule, B=2, T=37, H=1, D=16, seed=hash((rule, timing, alignment)) % 1000)
    opts = dict(rule=rule, timing=timing, alignment=alignment)
    check(run(x, "triton", torch.float32, chunk_size=16, **opts), run(x, "recurrent", torch.float64, **opts),
          TOL_FP32)


@pytest.mark.parametrize("rule", ["falcon-1a", "falcon-2a"])
@pytest.mark.parametrize("timing", ["raw", "rbw"])
@pytest.mark.parametrize("chunk_size", [32, 64])
def test_chunks_longer_than_the_sequence_and_inner_blocks(rule: str, timing: str, chunk_size: int) -> None:
    """T = 40 with chunks of 32/64: a short last chunk, and falcon-2a's 16-token blocks inside a chunk."""
    x = inputs(rule, B=1, T=40, H=2, D=16, seed=chunk_size + (timing == "rbw"))
    opts = dict(rule=rule, timing=timing)
    check(run(x, "triton", torch.float32, chunk_size=chunk_size, **opts), run(x, "recurrent", torch.float64, **opts),
          TOL_FP32)


@pytest.mark.parametrize("rule", ["falcon-1a", "falcon-2a"])
@pytest.mark.parametrize("alignment", ["shifted", "same_time"])
def test_continuing_from_a_state_equals_one_pass(rule: str, alignment: str) -> None:
    """A first segment by the oracle, the second by the kernels from its state (last key, S)."""
    check_continuation(inputs(rule, B=1, T=30, H=2, D=16, seed=7), split=11, rule=rule, alignment=alignment)


def check_continuation(x: dict[str, Tensor], split: int, **opts) -> None:
    """Tokens before ``split`` by the float64 oracle; the rest by the kernels from the oracle's final state
    (every field: S, the last key, a window tail) against the oracle from that state."""
    T = x["q"].shape[1]
    first = {n: (t[:, :split] if t.dim() >= 3 and t.shape[1] == T else t) for n, t in x.items()}
    second = {n: (t[:, split:] if t.dim() >= 3 and t.shape[1] == T else t) for n, t in x.items()}
    ins = [first[n].double() for n in ("q", "k", "v", "beta", "lam")]
    _, state = fast_weight_rule(*ins, backend="recurrent", initial_state=first["S0"].double(),
                                output_final_state=True, **opts)
    state = FastWeightState(*(t.detach() for t in state))
    out = run(second, "triton", torch.float32, state=FastWeightState(*(t.float() if t.is_floating_point() else t
                                                                       for t in state)), chunk_size=16, **opts)
    check(out, run(second, "recurrent", torch.float64, state=state, **opts), TOL_FP32)


@pytest.mark.parametrize("rule", ["falcon-1a", "falcon-2a"])
def test_packed_sequences_match_one_call_each(rule: str) -> None:
    """cu_seqlens with a one-token sequence and lengths that do not divide the chunk; one S0 row each."""
    bounds = [0, 5, 21, 22, 40]
    x = inputs(rule, B=1, T=40, H=2, D=16, seed=11)
    x["S0"] = torch.randn(len(bounds) - 1, 2, 16, 16, generator=torch.Generator().manual_seed(12)) / 16
    x["wS"] = torch.randn(len(bounds) - 1, 2, 16, 16, generator=torch.Generator().manual_seed(13))
    cu = torch.tensor(bounds, device=DEVICE)
    out = run(x, "triton", torch.float32, chunk_size=16, cu_seqlens=cu, rule=rule)
    check(out, run(x, "recurrent", torch.float64, cu_seqlens=cu, rule=rule), TOL_FP32)


# rows of 45 tokens in chunks of 16: samples of 1 token (a row's first among them), one that ends a chunk, one that
# fills a chunk, ones that cross one or two chunk boundaries (32 tokens), a short last chunk
SAMPLE_ID = torch.tensor([sum(([n] * size for n, size in enumerate(row)), [])
                          for row in ([1, 15, 16, 3, 1, 9], [5, 32, 1, 7])])


@pytest.mark.parametrize(("alignment", "timing", "normalize"), [("shifted", "rbw", False), ("same_time", "raw", True)])
def test_falcon1a_samples_by_id_are_the_samples_run_apart(alignment: str, timing: str, normalize: bool) -> None:
    """falcon-1a over rows of samples by ``sample_id``, on the kernels in chunks of 16 as the rows are, against the
    same samples as the kernels' packed sequences (``cu_seqlens``) and against each sample run alone by the float64
    oracle (the op's own way for other backends): outputs and the gradients of q, k, v, β (or η) and λ. Shifted: a
    sample's first token writes no pair, and its last key none in the next sample; with η given, the scale-coupled
    ridge."""
    B, T = SAMPLE_ID.shape
    x = inputs("falcon-1a", B=B, T=T, H=2, D=16, seed=31 + normalize)
    opts = dict(rule="falcon-1a", alignment=alignment, timing=timing, scale_coupled_ridge=not normalize)

    def by(backend: str, dtype: torch.dtype, packed: bool = False, **kw) -> list[Tensor]:
        leaves = [x[n].to(DEVICE, dtype).clone().requires_grad_(True) for n in ("q", "k", "v", "beta", "lam")]
        q, k, v, beta, lam = leaves
        if packed:
            starts = torch.cat([torch.ones(B, 1, dtype=torch.bool), SAMPLE_ID[:, 1:] != SAMPLE_ID[:, :-1]], 1)
            cu = torch.cat([starts.flatten().nonzero().flatten(), torch.tensor([B * T])]).to(DEVICE)
            o, _ = fast_weight_rule(*(t.flatten(0, 1)[None] for t in (q, k, v)), lam=lam.flatten(0, 1)[None],
                                    **gain(beta.flatten(0, 1)[None], normalize), backend=backend, cu_seqlens=cu,
                                    **opts, **kw)
            o = o[0].unflatten(0, (B, T))
        else:
            o, _ = fast_weight_rule(q, k, v, lam=lam, **gain(beta, normalize), backend=backend,
                                    sample_id=SAMPLE_ID.to(DEVICE), **opts, **kw)
        (o.double() * x["w"].to(DEVICE, torch.float64)).sum().backward()
        return [o] + [t.grad for t in leaves]

    by_id = by("triton", torch.float32, chunk_size=16)
    packed = by("triton", torch.float32, packed=True, chunk_size=16)
    oracle = by("recurrent", torch.float64)
    for name, a, b, c in zip(("o", "dq", "dk", "dv", "dbeta", "dlam"), by_id, packed, oracle):
        assert not torch.isnan(a).any(), f"{name}: NaN (an element was not written)"
        assert rms_rel(a, b) <= 1e-5, f"{name}: relative RMS error {rms_rel(a, b):.2e} to the packed sequences"
        assert rms_rel(a, c) <= TOL_FP32, f"{name}: relative RMS error {rms_rel(a, c):.2e} to the oracle"


def test_sample_ids_refuse_a_state_and_a_bad_shape_by_name() -> None:
    x = inputs("falcon-1a", B=2, T=45, H=1, D=16, seed=0)
    args = [x[n].to(DEVICE) for n in ("q", "k", "v", "beta", "lam")]
    ids = SAMPLE_ID.to(DEVICE)
    with pytest.raises(ValueError, match="sample_id runs fresh samples with no state in or out"):
        fast_weight_rule(*args, rule="falcon-1a", backend="triton", sample_id=ids, output_final_state=True)
    with pytest.raises(ValueError, match=r"sample_id must be integers \[B, T\] = \(2, 45\)"):
        fast_weight_rule(*args, rule="falcon-1a", backend="triton", sample_id=ids.float())


@pytest.mark.parametrize("rule", ["falcon-1a", "falcon-2a"])
@pytest.mark.parametrize("variant", ["scale_coupled_ridge", "ctx_eta", "clamped", "timing_rbw_clamped"])
def test_ridge_options_and_the_decay_clamp(rule: str, variant: str) -> None:
    """λ̄·‖x‖², η given directly (eta=), and λ large enough that α = min(ηλ, 1 − ε_γ) clamps."""
    clamped = variant.endswith("clamped")
    x = inputs(rule, B=1, T=26, H=2, D=16, seed=len(variant), lam_scale=40.0 if clamped else 1.0)
    opts = dict(rule=rule, scale_coupled_ridge=variant == "scale_coupled_ridge", normalize=variant != "ctx_eta",
                timing="rbw" if variant.startswith("timing_rbw") else "raw")
    if variant == "ctx_eta":
        x["beta"] = x["beta"] * 0.1
    ref = run(x, "recurrent", torch.float64, **opts)
    check(run(x, "triton", torch.float32, chunk_size=16, **opts), ref, TOL_FP32)


@pytest.mark.parametrize("rule", ["falcon-1a", "falcon-2a"])
def test_zero_keys_with_eps_zero_stay_finite(rule: str) -> None:
    """‖x‖² + λ + ε = 0: the step is a no-op, nothing is NaN or inf (outputs and gradients)."""
    x = inputs(rule, B=1, T=20, H=1, D=16, seed=3)
    x["k"] = torch.zeros_like(x["k"])
    x["lam"] = torch.zeros_like(x["lam"])
    opts = dict(rule=rule, eps=0.0)
    out = run(x, "triton", torch.float32, chunk_size=16, **opts)
    for name, t in zip(NAMES, out):
        assert torch.isfinite(t).all(), f"{name} is not finite"
    check(out, run(x, "recurrent", torch.float64, **opts), TOL_FP32)


def test_bad_inputs_are_refused_by_name() -> None:
    x = inputs("falcon-2a", B=1, T=4, H=1, D=16, seed=0)
    args = [x[n].to(DEVICE) for n in ("q", "k", "v", "beta", "lam")]
    with pytest.raises(ValueError, match="chunk_size"):
        fast_weight_rule(*args, rule="falcon-2a", backend="triton", chunk_size=24)
    with pytest.raises(ValueError, match="decay_floor"):
        fast_weight_rule(*args, rule="falcon-2a", backend="triton", decay_floor=1e-5)
    with pytest.raises(ValueError, match="float64"):
        fast_weight_rule(*(t.double() for t in args), rule="falcon-2a", backend="triton")


# (dtype, (B, T, H, D), timing): bf16 at the benchmark's head sizes, an odd length, RBW; fp32 once; and the
# longest benchmark shape, T = 16384, in both dtypes
GPU_CASES = [(torch.bfloat16, (2, 2048, 4, 64), "raw"), (torch.bfloat16, (1, 4096, 2, 128), "raw"),
             (torch.bfloat16, (1, 1000, 3, 64), "rbw"), (torch.float32, (1, 1000, 3, 64), "raw"),
             (torch.bfloat16, (1, 16384, 16, 128), "raw"), (torch.float32, (1, 16384, 16, 128), "raw")]


@pytest.mark.gpu
@pytest.mark.parametrize("rule", ["falcon-1a", "falcon-2a"])
@pytest.mark.parametrize("dtype, shape, timing", GPU_CASES, ids=lambda c: str(c).replace("torch.", "").replace(
    ", ", "x").strip("()"))
def test_real_sizes_on_the_gpu(rule: str, dtype: torch.dtype, shape: tuple[int, int, int, int], timing: str) -> None:
    """Real sizes against the float64 chunk form (itself held to the oracle): bf16 <= 1e-2, fp32 <= 1e-3."""
    B, T, H, D = shape
    x = inputs(rule, B=B, T=T, H=H, D=D, seed=T + D)
    x["k"] = x["k"] * 2.0  # ‖x‖² ~ 4: η of order 0.3, carries well inside (0, 1)
    opts = dict(rule=rule, timing=timing)
    ref = run(x, "chunk", torch.float64, chunk_size=64, **opts)
    out = run(x, "triton", dtype, chunk_size=64, **opts)
    errs = {name: rms_rel(a, b) for name, a, b in zip(NAMES, out, ref)}
    print(f"\nGPUCHECK {rule} {str(dtype)[6:]} {shape} {timing}: " +
          " ".join(f"{n}={e:.1e}" for n, e in errs.items()))
    check(out, ref, 1e-2 if dtype == torch.bfloat16 else 1e-3)


@pytest.mark.parametrize("rule", ["falcon-1a", "falcon-1"])
def test_batch_sliced_past_the_grid_limit(rule: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch whose B·H passes the launch-axis limit runs in slices: the same outputs, state and gradients as
    one launch (the limit lowered to 4, the launch rows of one chunk, so that each of the three rows is a slice)."""
    from falcon_lab.kernels.common import grid

    x = inputs(rule, B=3, T=12, H=2, D=8, seed=5)
    whole = run(x, "triton", torch.float32, rule=rule, chunk_size=16)
    monkeypatch.setattr(grid, "MAX_GRID_ROWS", 4)
    sliced = run(x, "triton", torch.float32, rule=rule, chunk_size=16)
    for name, a, b in zip(NAMES, whole, sliced):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-6, msg=name)


@pytest.mark.parametrize("rule", ["falcon-1a", "falcon-2a", "falcon-1"])
def test_packed_sequences_sliced_past_the_grid_limit(rule: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Packed sequences past the launch-axis limit run in groups of whole sequences: the same outputs, final
    states and gradients as one launch (the limit lowered so that the four sequences make three groups)."""
    from falcon_lab.kernels.common import grid

    bounds = [0, 5, 21, 22, 40]
    x = inputs(rule, B=1, T=40, H=2, D=8, seed=21)
    x["S0"] = torch.randn(len(bounds) - 1, 2, 8, 8, generator=torch.Generator().manual_seed(22)) / 8
    x["wS"] = torch.randn(len(bounds) - 1, 2, 8, 8, generator=torch.Generator().manual_seed(23))
    cu = torch.tensor(bounds, device=DEVICE)
    whole = run(x, "triton", torch.float32, chunk_size=16, cu_seqlens=cu, rule=rule)
    monkeypatch.setattr(grid, "MAX_GRID_ROWS", 8)
    assert grid.sequence_groups(bounds, 2, 16) == [(0, 2), (2, 3), (3, 4)]  # 4 launch rows a chunk
    sliced = run(x, "triton", torch.float32, chunk_size=16, cu_seqlens=cu, rule=rule)
    for name, a, b in zip(NAMES, whole, sliced):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-6, msg=name)


@pytest.mark.gpu
@pytest.mark.parametrize("rule", ["falcon-1a", "falcon-1"])
def test_batch_past_the_grid_limit_on_the_gpu(rule: str) -> None:
    """B·H = 65,600, past CUDA's 65,535 on a launch axis (one addition sample a row at batch 16,400, 4 heads):
    the launch runs, and outputs, final state and gradients match the float64 chunk form."""
    x = inputs(rule, B=16400, T=24, H=4, D=16, seed=65)
    ref = run(x, "chunk", torch.float64, rule=rule, chunk_size=16)
    out = run(x, "triton", torch.float32, rule=rule, chunk_size=16)
    check(out, ref, 1e-3)
