"""backend="triton" for falcon-3 (its own chunk kernels, falcon_lab/kernels/window/triton_falcon3*.py) against the float64
recurrent oracle: outputs, final state and every gradient (q, k, v, β, λ, the initial S). Without CUDA the kernels
run in Triton's interpreter at tiny sizes; every buffer the kernels write is allocated full of NaN here.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from falcon_lab.kernels import FastWeightState, fast_weight_rule
from falcon_lab.kernels.common import triton_helpers
from falcon_lab.kernels.common.config import FUSED_MAX_WINDOW
from falcon_lab.kernels.window.triton_falcon3_launch import MAX_ROWS, geometry
from tests.test_triton_inner_product import DEVICE, TOL_FP32, check, check_continuation, inputs, rms_rel, run

RULE = "falcon-3"


@pytest.fixture(autouse=True)
def poisoned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(triton_helpers, "new_buffer", lambda *shape, dtype, device: torch.full(
        shape, float("nan"), dtype=dtype, device=device))


@pytest.mark.parametrize("window", [1, 2, 4])
@pytest.mark.parametrize("timing", ["raw", "rbw"])
def test_forward_and_gradients_match_the_oracle(window: int, timing: str) -> None:
    """T = 37 over chunks of 16 tokens (W = 1), 16 (W = 2: 32 slot rows) or 16 (W = 4: 64 rows), a short last one,
    from a nonzero initial S."""
    x = inputs(RULE, B=2, T=37, H=1, D=16, seed=window * 10 + (timing == "rbw"))
    opts = dict(rule=RULE, window=window, timing=timing)
    check(run(x, "triton", torch.float32, chunk_size=16, **opts), run(x, "recurrent", torch.float64, **opts),
          TOL_FP32)


def test_the_inverse_by_substitution_matches_the_oracle(monkeypatch: pytest.MonkeyPatch) -> None:
    """The UT transform's inverse by substitution (``triton_launch.INVERSE``; doubling, the default, everywhere else)
    at W = 4 (64 slot rows a chunk)."""
    from falcon_lab.kernels.regression import triton_launch

    monkeypatch.setattr(triton_launch, "INVERSE", "substitution")
    x = inputs(RULE, B=2, T=37, H=1, D=16, seed=41)
    opts = dict(rule=RULE, window=4, timing="raw")
    check(run(x, "triton", torch.float32, chunk_size=16, **opts), run(x, "recurrent", torch.float64, **opts),
          TOL_FP32)


@pytest.mark.parametrize("timing", ["raw", "rbw"])
def test_same_time_alignment(timing: str) -> None:
    x = inputs(RULE, B=2, T=29, H=2, D=16, seed=3 + (timing == "rbw"))
    opts = dict(rule=RULE, window=3, timing=timing, alignment="same_time")
    check(run(x, "triton", torch.float32, chunk_size=16, **opts), run(x, "recurrent", torch.float64, **opts),
          TOL_FP32)


@pytest.mark.parametrize("window,chunk_size,T", [(3, 32, 40), (5, 64, 30), (1, 64, 70), (2, 32, 2)])
def test_padded_windows_and_chunk_sizes(window: int, chunk_size: int, T: int) -> None:
    """A window of 3 (padded to 4 slots: 16 tokens of 64 rows), of 5 (8 slots: 8 tokens, a token tile of 16 with
    half masked), W = 1 over two chunks of 64 tokens, and two tokens."""
    x = inputs(RULE, B=1, T=T, H=2, D=16, seed=window + chunk_size + T)
    opts = dict(rule=RULE, window=window, timing="raw")
    check(run(x, "triton", torch.float32, chunk_size=chunk_size, **opts),
          run(x, "recurrent", torch.float64, **opts), TOL_FP32)


@pytest.mark.parametrize("variant", ["scale_coupled_ridge", "ctx_eta", "clamped"])
def test_ridge_options_and_the_decay_clamp(variant: str) -> None:
    """λ̄·μ, η given directly (eta=), and λ large enough that α = min(ηλ, 1 − ε_γ) clamps."""
    clamped = variant == "clamped"
    x = inputs(RULE, B=1, T=26, H=2, D=16, seed=len(variant), lam_scale=40.0 if clamped else 1.0)
    opts = dict(rule=RULE, window=3, scale_coupled_ridge=variant == "scale_coupled_ridge",
                normalize=variant != "ctx_eta")
    if variant == "ctx_eta":
        x["beta"] = x["beta"] * 0.1
    check(run(x, "triton", torch.float32, chunk_size=16, **opts), run(x, "recurrent", torch.float64, **opts),
          TOL_FP32)


def test_bf16_inputs() -> None:
    """q, k, v, β, λ in bf16 (slots stored in bf16, o in bf16, the state fp32) against the float64 oracle on the
    same rounded inputs: within bf16's rounding."""
    x = inputs(RULE, B=1, T=20, H=2, D=16, seed=16)
    for name in ("q", "k", "v", "beta", "lam"):
        x[name] = x[name].bfloat16().float()
    opts = dict(rule=RULE, window=4)
    out = run(x, "triton", torch.bfloat16, chunk_size=16, **opts)
    assert out[0].dtype == torch.bfloat16
    check(out, run(x, "recurrent", torch.float64, **opts), 2e-2)


def test_continuing_from_a_state_with_its_window_tail_equals_one_pass() -> None:
    """A first segment by the oracle, the second by the kernels from its state: S, the last key and the last
    W − 1 pairs, which the second segment's first windows read."""
    check_continuation(inputs(RULE, B=1, T=30, H=2, D=16, seed=7), split=11, rule=RULE, window=4)


def test_the_final_state_continues_the_oracle() -> None:
    """Every field of the final state (the window tail included) equals the oracle's."""
    x = inputs(RULE, B=2, T=21, H=2, D=16, seed=5)
    ins = [x[n].to(DEVICE) for n in ("q", "k", "v", "beta", "lam")]
    _, fast = fast_weight_rule(*ins, rule=RULE, backend="triton", chunk_size=16, output_final_state=True)
    _, ref = fast_weight_rule(*(t.double() for t in ins), rule=RULE, backend="recurrent", output_final_state=True)
    for name, a, b in zip(FastWeightState._fields, fast, ref):
        if a.is_floating_point():
            assert torch.allclose(a.double(), b, atol=1e-4), name
        else:
            assert torch.equal(a, b), name


def check_packed_outputs(rule: str, timing: str, **opts) -> None:
    """Packed sequences from fresh states, outputs alone (as a model trains with its samples apart): one call of the
    kernels over the sequences laid one to a row against the float64 oracle run on each sequence by itself,
    outputs and the gradients of q, k, v, β and λ. Lengths 5, 16, 1, 18: one shorter than the window, one token."""
    bounds = [0, 5, 21, 22, 40]
    x = inputs(rule, B=1, T=40, H=2, D=16, seed=17 + (timing == "rbw"))
    w = x["w"].to(DEVICE, torch.float64)

    def outputs(backend: str, dtype: torch.dtype, cu: bool) -> list[Tensor]:
        leaves = [x[n].detach().to(DEVICE, dtype).clone().requires_grad_(True)
                  for n in ("q", "k", "v", "beta", "lam")]
        if cu:
            o, _ = fast_weight_rule(*leaves, rule=rule, backend=backend, timing=timing, chunk_size=16,
                                    cu_seqlens=torch.tensor(bounds, device=DEVICE), **opts)
        else:
            o = torch.cat([fast_weight_rule(*(t[:, b:e] for t in leaves), rule=rule, backend=backend, timing=timing,
                                            **opts)[0] for b, e in zip(bounds, bounds[1:])], dim=1)
        (o.double() * w).sum().backward()
        return [o] + [t.grad for t in leaves]

    out, ref = outputs("triton", torch.float32, True), outputs("recurrent", torch.float64, False)
    for name, a, b in zip(("o", "dq", "dk", "dv", "dbeta", "dlam"), out, ref):
        assert not torch.isnan(a).any(), name
        assert rms_rel(a, b) <= TOL_FP32, f"{name}: relative RMS error {rms_rel(a, b):.2e}"


@pytest.mark.parametrize("timing", ["raw", "rbw"])
def test_packed_sequences_run_one_to_a_row(timing: str) -> None:
    check_packed_outputs(RULE, timing, window=4)


def check_packed_from_states(rule: str) -> None:
    """cu_seqlens with initial states (one S0 row a sequence) and the final state: one call of the kernels per
    sequence, against the oracle's (outputs, final S, every gradient)."""
    bounds = [0, 5, 21, 22, 40]
    x = inputs(rule, B=1, T=40, H=2, D=16, seed=11)
    x["S0"] = torch.randn(len(bounds) - 1, 2, 16, 16, generator=torch.Generator().manual_seed(12)) / 16
    x["wS"] = torch.randn(len(bounds) - 1, 2, 16, 16, generator=torch.Generator().manual_seed(13))
    cu = torch.tensor(bounds, device=DEVICE)
    check(run(x, "triton", torch.float32, chunk_size=16, cu_seqlens=cu, rule=rule, window=3),
          run(x, "recurrent", torch.float64, cu_seqlens=cu, rule=rule, window=3), TOL_FP32)


def test_packed_sequences_from_states_match_one_call_each() -> None:
    check_packed_from_states(RULE)


def test_the_form_refuses_packed_sequences_and_the_op_wide_windows_by_name() -> None:
    from falcon_lab.kernels.common.config import RuleConfig
    from falcon_lab.kernels.window.fused import triton_falcon3

    x = inputs(RULE, B=1, T=12, H=1, D=16, seed=3)
    ins = [x[n].to(DEVICE) for n in ("q", "k", "v", "beta", "lam")]
    with pytest.raises(ValueError, match="triton_falcon3 takes no cu_seqlens"):
        triton_falcon3(*ins, RuleConfig(rule=RULE), None, True, cu_seqlens=torch.tensor([0, 5, 12], device=DEVICE))
    with pytest.raises(ValueError, match=f"window up to {FUSED_MAX_WINDOW}"):
        fast_weight_rule(*ins, rule=RULE, backend="triton", window=FUSED_MAX_WINDOW + 1)


def test_the_chunk_geometry() -> None:
    """R = min(chunk_size · WP, 64) slot rows, C = R / WP tokens, token tiles of at least 16."""
    assert MAX_ROWS == FUSED_MAX_WINDOW
    assert geometry(4, 64) == dict(C=16, CT=16, R=64, WP=4)
    assert geometry(3, 16) == dict(C=16, CT=16, R=64, WP=4)
    assert geometry(1, 32) == dict(C=32, CT=32, R=32, WP=1)
    assert geometry(5, 16) == dict(C=8, CT=16, R=64, WP=8)
    assert geometry(64, 16) == dict(C=1, CT=16, R=64, WP=64)


def test_bf16_heads_under_32_take_fp32_products_on_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The products' precision on a GPU (not under the interpreter, where every product is "ieee"): bf16 operands
    as falcon-1's from a head width of 32 up; below it fp32 operands (tf32x3), since the bf16 products faulted
    there on an H200 (records/bench/kernels-2026-12-03)."""
    from falcon_lab.kernels.regression import triton_launch
    from falcon_lab.kernels.window.triton_falcon3_launch import _precision

    monkeypatch.setattr(triton_launch, "interpreting", lambda: False)
    assert _precision(torch.bfloat16, 16, 16) == ("tf32x3", "tf32x3")
    assert _precision(torch.bfloat16, 64, 16) == ("tf32x3", "tf32x3")
    assert _precision(torch.bfloat16, 32, 64) == ("bf16", "bf16")
    assert _precision(torch.float32, 16, 16) == ("tf32x3", "tf32x3")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-3), (torch.bfloat16, 2e-2)])
def test_gpu_sizes(dtype: torch.dtype, tol: float) -> None:
    """(B, T, H, D) = (8, 2048, 12, 64), W = 4, chunk_size = 64 (16 tokens of 64 slot rows) on a GPU, in fp32 and
    bf16, against the float64 chunk form (itself held to the oracle to 1e-10 in test_backends_falcon3.py); the
    reference sees the inputs rounded to ``dtype``."""
    g = torch.Generator().manual_seed(2048)
    B, T, H, D = 8, 2048, 12, 64
    x = {"q": torch.randn(B, T, H, D, generator=g), "k": torch.randn(B, T, H, D, generator=g) / D ** 0.5,
         "v": torch.randn(B, T, H, D, generator=g), "beta": 0.05 + 1.9 * torch.rand(B, T, H, generator=g),
         "lam": torch.rand(B, T, H, generator=g), "S0": torch.randn(B, H, D, D, generator=g) / D,
         "w": torch.randn(B, T, H, D, generator=g), "wS": torch.randn(B, H, D, D, generator=g)}
    for name in ("q", "k", "v", "beta", "lam"):
        x[name] = x[name].to(dtype).float()
    out = run(x, "triton", dtype, rule=RULE, window=4, chunk_size=64)
    ref = run(x, "chunk", torch.float64, rule=RULE, window=4, chunk_size=16)
    for name, a, b in zip(("o", "S", "dq", "dk", "dv", "dbeta", "dlam", "dS0"), out, ref):
        assert not torch.isnan(a).any(), name
        assert rms_rel(a, b) <= tol, f"{name}: {rms_rel(a, b):.2e}"


# rows of 40 tokens in chunks of 16: a sample of 1 token first in its row, one ending a chunk, one filling a chunk, one
# of 1 token opening a chunk, a short last chunk; samples crossing chunk boundaries, and a chunk that opens a sample
# after the carried state's ends (its exit state must drop the carried one)
LENGTHS = ([1, 4, 11, 16, 1, 7], [1, 19, 13, 7])
SAMPLE_ID = torch.tensor([sum(([n] * size for n, size in enumerate(row)), []) for row in LENGTHS])


def each_sample(x: dict[str, Tensor], **opts) -> list[Tensor]:
    """o and the gradients of <o, w> for q, k, v, β, λ: each sample alone, fresh, by the float64 oracle."""
    leaves = [x[n].double().clone().requires_grad_(True) for n in ("q", "k", "v", "beta", "lam")]
    rows = []
    for row, lengths in enumerate(LENGTHS):
        ends = torch.tensor(lengths).cumsum(0).tolist()
        rows.append(torch.cat([fast_weight_rule(*(t[row:row + 1, e - n:e] for t in leaves[:3]),
                                                beta=leaves[3][row:row + 1, e - n:e],
                                                lam=leaves[4][row:row + 1, e - n:e], backend="recurrent", **opts)[0]
                               for n, e in zip(lengths, ends)], 1))
    o = torch.cat(rows, 0)
    (o * x["w"].double()).sum().backward()
    return [o] + [t.grad for t in leaves]


def by_id(x: dict[str, Tensor], **opts) -> list[Tensor]:
    """The same through ``fast_weight_rule(..., sample_id=)`` on the kernels: the rows as they are, in chunks of 16
    tokens (or 8, for windows of more than 4 slots)."""
    leaves = [x[n].to(DEVICE).clone().requires_grad_(True) for n in ("q", "k", "v", "beta", "lam")]
    o, _ = fast_weight_rule(*leaves[:3], beta=leaves[3], lam=leaves[4], backend="triton", chunk_size=16,
                            sample_id=SAMPLE_ID.to(DEVICE), **opts)
    (o.double() * x["w"].to(DEVICE, torch.float64)).sum().backward()
    return [o] + [t.grad for t in leaves]


@pytest.mark.parametrize(("window", "alignment", "timing"), [
    (4, "shifted", "raw"), (4, "shifted", "rbw"), (4, "same_time", "raw"), (4, "same_time", "rbw"),
    (2, "same_time", "raw"), (5, "shifted", "rbw")])
def test_rows_of_samples_are_the_samples_run_alone(window: int, alignment: str, timing: str) -> None:
    """Rows of fresh samples by id (W = 4: 16 tokens of 64 slot rows a chunk; W = 5: 8 tokens, a token tile of 16
    over them) against each sample alone by the float64 oracle: outputs and the gradients of q, k, v, β and λ.
    No window holds a pair of another sample, no decay runs across a sample's start, and the carried state reaches
    only its own sample's tokens."""
    x = inputs(RULE, B=2, T=40, H=2, D=16, seed=window * 7 + len(alignment) + (timing == "rbw"))
    opts = dict(rule=RULE, window=window, alignment=alignment, timing=timing)
    for name, a, b in zip(("o", "dq", "dk", "dv", "dbeta", "dlam"), by_id(x, **opts), each_sample(x, **opts)):
        assert a is not None and not torch.isnan(a).any(), f"{name}: missing or NaN"
        assert rms_rel(a, b) <= TOL_FP32, f"{name}: relative RMS error {rms_rel(a, b):.2e}"


@pytest.mark.parametrize(("window", "alignment"), [(4, "shifted"), (3, "same_time")])
def test_the_glue_by_sample_id_compiles_whole_and_gives_its_eager_values_and_gradients(window: int,
                                                                                      alignment: str) -> None:
    """What falcon-3's rows by sample id compute around the eigenvalue and the chunk kernels (the window Gram, the
    slot rows, the gates) are one graph each for torch.compile (no break), with the eager functions' values and
    gradients (``falcon3-glue=compiled`` on a GPU)."""
    from falcon_lab.kernels.common.config import RuleConfig
    from falcon_lab.kernels.window.fused import _sample_gates, _sample_slots, sample_windows
    from falcon_lab.kernels.window.triton_falcon3_launch import slots

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    torch.manual_seed(window)
    cfg = RuleConfig(rule=RULE, window=window, alignment=alignment)
    win = sample_windows(SAMPLE_ID, window, cfg.shifted, torch.device("cpu"))
    B, T = SAMPLE_ID.shape
    q, k, v = (torch.randn(B, T, 2, 4).requires_grad_() for _ in range(3))
    top = (torch.rand(B, T, 2) + 0.5).requires_grad_()
    beta, lam = ((torch.rand(B, T, 2) + 0.1).requires_grad_() for _ in range(2))
    outs, grads = [], []
    for slots_fn, gates_fn in ((_sample_slots, _sample_gates),
                               tuple(torch.compile(f, fullgraph=True, backend="aot_eager")
                                     for f in (_sample_slots, _sample_gates))):
        out = (*slots_fn(q, k, v, win.pair, win.held, cfg, slots(window)),
               *gates_fn(top, win.n_pairs, beta, lam, cfg))
        outs.append(out)
        grads.append(torch.autograd.grad([t.float().sum() * (i + 1) for i, t in enumerate(out)],
                                         (k, v, top, beta, lam)))
    for want, got in zip(outs[0] + grads[0], outs[1] + grads[1]):
        torch.testing.assert_close(got, want)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] <= 2


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-3), (torch.bfloat16, 2e-2)])
def test_gpu_rows_of_samples(dtype: torch.dtype, tol: float) -> None:
    """Rows of the same-time table's shape, thinned (32 rows of 256 tokens, samples of 1 to 80 tokens, 4 heads of
    64, W = 4, chunk_size = 64) by sample id on a GPU, in fp32 and bf16, against the float64 chunk form over the
    same samples packed (``cu_seqlens``); the reference sees the inputs rounded to ``dtype``."""
    check_rows_of_samples_on_gpu(RULE, dtype, tol)


def check_rows_of_samples_on_gpu(rule: str, dtype: torch.dtype, tol: float) -> None:
    """``test_gpu_rows_of_samples`` for ``rule`` (any rule that takes rows of samples by id)."""
    g = torch.Generator().manual_seed(256)
    B, T, H, D = 32, 256, 4, 64
    rows = []
    for _ in range(B):
        lengths = []
        while sum(lengths) < T:
            lengths.append(min(int(torch.randint(1, 81, (1,), generator=g)), T - sum(lengths)))
        rows.append(torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths)))
    sample_id = torch.stack(rows)
    x = {"q": torch.randn(B, T, H, D, generator=g), "k": torch.randn(B, T, H, D, generator=g) / D ** 0.5,
         "v": torch.randn(B, T, H, D, generator=g), "beta": 0.05 + 1.9 * torch.rand(B, T, H, generator=g),
         "lam": torch.rand(B, T, H, generator=g), "w": torch.randn(B, T, H, D, generator=g)}
    starts = torch.cat([torch.ones(B, 1, dtype=torch.bool), sample_id[:, 1:] != sample_id[:, :-1]], 1).flatten()
    bounds = torch.cat([starts.nonzero().flatten(), torch.tensor([B * T])])

    def run(kernels: bool) -> list[Tensor]:
        dt = dtype if kernels else torch.float64
        leaves = [x[n].to(dtype).to(DEVICE, dt).detach().requires_grad_() for n in ("q", "k", "v", "beta", "lam")]
        opts = dict(rule=rule, window=4, chunk_size=64 if kernels else 16)
        if kernels:
            o, _ = fast_weight_rule(*leaves[:3], beta=leaves[3], lam=leaves[4], backend="triton",
                                    sample_id=sample_id.to(DEVICE), **opts)
        else:
            o, _ = fast_weight_rule(*(t.flatten(0, 1)[None] for t in leaves[:3]), beta=leaves[3].flatten(0, 1)[None],
                                    lam=leaves[4].flatten(0, 1)[None], backend="chunk", cu_seqlens=bounds.to(DEVICE),
                                    **opts)
            o = o[0].unflatten(0, (B, T))
        (o.double() * x["w"].to(DEVICE, torch.float64)).sum().backward()
        return [o] + [t.grad for t in leaves]

    for name, a, b in zip(("o", "dq", "dk", "dv", "dbeta", "dlam"), run(True), run(False)):
        assert not torch.isnan(a).any(), name
        assert rms_rel(a, b) <= tol, f"{name}: {rms_rel(a, b):.2e}"


def test_launch_overrides_reach_the_falcon3_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """``LAB_LAUNCH``'s f3_* kernels (``triton_launch.parse_launch``) set falcon-3's blocks and warps: f3_grad and
    f3_read in value blocks of 8 (two of each loop at D = 16) still give the oracle's outputs and gradients."""
    from falcon_lab.kernels.regression import triton_launch
    from falcon_lab.kernels.window.triton_falcon3_launch import _config

    got = triton_launch.parse_launch("f3_grad:BV=8,num_warps=8;f3_read:BV=8")
    monkeypatch.setattr(triton_launch, "LAUNCH_OVERRIDES", got)
    assert _config("grad", 16, 16) == dict(BK=16, BV=8, num_warps=8)
    x = inputs(RULE, B=1, T=37, H=1, D=16, seed=77)
    opts = dict(rule=RULE, window=4, timing="rbw")
    check(run(x, "triton", torch.float32, chunk_size=16, **opts), run(x, "recurrent", torch.float64, **opts),
          TOL_FP32)
