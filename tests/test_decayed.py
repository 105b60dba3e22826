"""``falcon_lab.mixers.decayed``: RetNet's and Mamba-2's decayed linear attention on falcon-1a's fused kernels (η = 1, log γ = g;
Triton's interpreter without a GPU) against the float64 recurrent oracle of ``falcon_lab.kernels.linear_attention``, outputs
and the gradients of q, k, v and the log decays; packed samples as the kernels' packed sequences; ``auto``'s
choice; refusals by name."""

from __future__ import annotations

import pytest
import torch

from falcon_lab.kernels import linear_attention
from falcon_lab.mixers.decayed import decayed_linear_attention, decayed_over_samples
from tests.test_triton_inner_product import (  # noqa: F401 (poisoned: the autouse fixture, used by name)
    DEVICE, TOL_FP32, poisoned)

B, H, DK, DV = 2, 2, 16, 16


def case(T: int, seed: int) -> dict[str, torch.Tensor]:
    """q, k, v and log decays g <= 0 mixing none, mild and strong (down to −4) decays; a cotangent w of o."""
    gen = torch.Generator().manual_seed(seed)
    strength = torch.tensor([0.0, 0.3, 4.0], dtype=torch.float64)[torch.randint(0, 3, (B, T, H), generator=gen)]
    rand = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    return {"q": rand(B, T, H, DK), "k": rand(B, T, H, DK), "v": rand(B, T, H, DV),
            "g": -strength * torch.rand(B, T, H, generator=gen, dtype=torch.float64), "w": rand(B, T, H, DV)}


def outputs_and_grads(x: dict[str, torch.Tensor], fn, dtype: torch.dtype, **opts) -> list[torch.Tensor]:
    low = dtype in (torch.bfloat16, torch.float16)  # the log decays stay float32 beside half-precision q, k, v
    leaves = [x[n].to(DEVICE, torch.float32 if low and n == "g" else dtype).clone().requires_grad_(True)
              for n in ("q", "k", "v", "g")]
    o, _ = fn(*leaves, **opts)
    (o.double() * x["w"].to(DEVICE)).sum().backward()
    return [o] + [t.grad for t in leaves]


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double().cpu(), b.double().cpu()
    return ((a - b).norm() / b.norm().clamp(min=1e-300)).item()


@pytest.mark.parametrize("T", [7, 37])
@pytest.mark.parametrize("timing", ["raw", "rbw"])
@pytest.mark.parametrize("alignment", ["same_time", "shifted"])
def test_the_fused_form_matches_the_oracle(alignment: str, timing: str, T: int) -> None:
    """Chunks of 16 with a short last one; a fresh sequence (shifted: the first token writes nothing)."""
    x = case(T, hash((alignment, timing, T)) % 1000)
    opts = dict(scale=0.7, alignment=alignment, timing=timing)
    out = outputs_and_grads(x, decayed_linear_attention, torch.float32, backend="triton", chunk_size=16, **opts)
    ref = outputs_and_grads(x, linear_attention, torch.float64, backend="recurrent", **opts)
    for name, a, b in zip(("o", "dq", "dk", "dv", "dg"), out, ref):
        assert not torch.isnan(a).any(), name
        assert rel(a, b) <= TOL_FP32, f"{name}: relative error {rel(a, b):.2e}"


def test_a_call_with_a_state_or_off_the_gpu_takes_the_chunk_form_exactly() -> None:
    x = {n: t.float() for n, t in case(9, 1).items() if n != "w"}
    chunk, _ = linear_attention(*x.values(), backend="chunk", chunk_size=16)
    auto, _ = decayed_linear_attention(*x.values(), backend="auto", chunk_size=16)  # CPU tensors: the chunk form
    assert torch.equal(auto, chunk)
    x = {n: t.to(DEVICE) for n, t in x.items()}  # on a GPU the fused path would take them but for the state out
    chunk, state = linear_attention(*x.values(), backend="chunk", chunk_size=16, output_final_state=True)
    fused, fused_state = decayed_linear_attention(*x.values(), backend="triton", chunk_size=16,
                                                  output_final_state=True)
    assert torch.equal(fused, chunk) and torch.equal(fused_state.S, state.S)


@pytest.mark.gpu
def test_auto_takes_the_kernels_for_half_precision_inputs_only() -> None:
    """fp32 inputs (Mamba-2's) stay on the chunk form under ``auto``: bit for bit its output; bf16 ones do not."""
    x = {n: t.float().cuda() for n, t in case(37, 3).items() if n != "w"}
    chunk, _ = linear_attention(*x.values(), backend="chunk", chunk_size=16)
    auto, _ = decayed_linear_attention(*x.values(), backend="auto", chunk_size=16)
    assert torch.equal(auto, chunk)
    half = {n: t if n == "g" else t.bfloat16() for n, t in x.items()}
    fused, _ = decayed_linear_attention(*half.values(), backend="triton", chunk_size=16)
    auto, _ = decayed_linear_attention(*half.values(), backend="auto", chunk_size=16)
    assert torch.equal(auto, fused)


def test_refusals_name_the_problem() -> None:
    x = {n: t.float() for n, t in case(5, 2).items() if n != "w"}
    with pytest.raises(ValueError, match="chunk_size=48 for backend='triton'; accepted: 16, 32, 64"):
        decayed_linear_attention(*x.values(), backend="triton", chunk_size=48)
    with pytest.raises(ValueError, match="takes q, k, v in bf16, fp16 or fp32; got torch.float64"):
        decayed_linear_attention(*(t.double() for t in x.values()), backend="triton", chunk_size=16)
    with pytest.raises(ValueError, match="backend='fused'; accepted: auto, recurrent, chunk, triton"):
        decayed_linear_attention(*x.values(), backend="fused")


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(8, 100, 6, 64, 128), (2, 2048, 6, 128, 128)])
def test_bf16_at_the_tables_sizes_on_the_gpu(shape: tuple[int, int, int, int, int]) -> None:
    """On a GPU only (Triton's interpreter gives falcon-1a's kernels wrong values for bf16 operands on this CPU, the
    kernels' own bf16 tests run on a GPU too): RetNet's and Mamba-2's head sizes in bf16 against the float64 chunk
    form, outputs and gradients within 2e-2."""
    B, T, H, Dk, Dv = shape
    gen = torch.Generator().manual_seed(T)
    x = {"q": torch.randn(B, T, H, Dk, generator=gen, dtype=torch.float64) / Dk ** 0.5,
         "k": torch.randn(B, T, H, Dk, generator=gen, dtype=torch.float64) / Dk ** 0.5,
         "v": torch.randn(B, T, H, Dv, generator=gen, dtype=torch.float64),
         "g": -2.0 * torch.rand(B, T, H, generator=gen, dtype=torch.float64),
         "w": torch.randn(B, T, H, Dv, generator=gen, dtype=torch.float64)}
    for n in ("q", "k", "v"):  # both sides see the same bf16 inputs: the error measured is the kernels'
        x[n] = x[n].bfloat16().double()
    out = outputs_and_grads(x, decayed_linear_attention, torch.bfloat16, backend="triton", chunk_size=64)
    ref = outputs_and_grads(x, linear_attention, torch.float64, backend="chunk", chunk_size=64)
    for name, a, b in zip(("o", "dq", "dk", "dv", "dg"), out, ref):
        assert rel(a, b) <= 2e-2, f"{name}: relative error {rel(a, b):.2e}"


@pytest.mark.parametrize("timing", ["raw", "rbw"])
@pytest.mark.parametrize("alignment", ["same_time", "shifted"])
def test_samples_on_the_kernels_are_the_samples_run_apart(alignment: str, timing: str) -> None:
    """The samples of packed rows as the kernels' packed sequences (one row, ``cu_seqlens``, chunks of 16 starting at
    every sample, samples of 1 to 35 tokens) against each sample run alone by the float64 oracle: outputs and the
    gradients of q, k, v and the log decays. Shifted: every sample's first token writes nothing."""
    samples = torch.tensor([[0] * 5 + [1] * 35 + [2] * 1 + [3] * 9, [0] * 17 + [1] * 33], device=DEVICE)
    x = case(50, 11)
    opts = dict(scale=0.7, alignment=alignment, timing=timing)

    def apart(q, k, v, g, **kw):
        outs = []
        for row in range(B):
            ids = samples[row].cpu()
            for n in ids.unique():
                at = (ids == n).nonzero().flatten()
                o, _ = linear_attention(*(t[row:row + 1, at] for t in (q, k, v, g)), backend="recurrent", **kw)
                outs.append((row, at, o))
        o = q.new_zeros(B, q.shape[1], H, DV)
        for row, at, part in outs:
            o[row:row + 1, at] = part
        return o, None

    out = outputs_and_grads(x, lambda *a, **kw: (decayed_over_samples(*a, samples, backend="triton", chunk_size=16,
                                                                      **kw), None), torch.float32, **opts)
    ref = outputs_and_grads({n: t.to(DEVICE) for n, t in x.items()}, apart, torch.float64, **opts)
    for name, a, b in zip(("o", "dq", "dk", "dv", "dg"), out, ref):
        assert rel(a, b) <= TOL_FP32, f"{name}: relative error {rel(a, b):.2e}"


def test_packed_sequences_of_decayed_attention_start_from_their_own_state() -> None:
    """``decayed_attention(..., cu_seqlens)``: four sequences (5, 35, 1 and 34 tokens; chunks of 16) each from its own
    row of S0 equal four calls, outputs, final states and every gradient (the gates' included)."""
    from falcon_lab.kernels.inner_product.fused import decayed_attention

    gen = torch.Generator().manual_seed(4)
    bounds = [0, 5, 40, 41, 75]
    T, N = bounds[-1], len(bounds) - 1
    leaves = [torch.randn(1, T, H, DK, generator=gen), torch.randn(1, T, H, DK, generator=gen),
              torch.randn(1, T, H, DV, generator=gen), torch.rand(1, T, H, generator=gen),
              -2 * torch.rand(1, T, H, generator=gen), torch.randn(N, H, DK, DV, generator=gen)]
    w, wS = torch.randn(1, T, H, DV, generator=gen), torch.randn(N, H, DK, DV, generator=gen)
    for raw in (True, False):
        def run(packed: bool) -> list[torch.Tensor]:
            ins = [t.to(DEVICE).clone().requires_grad_(True) for t in leaves]
            if packed:
                o, S = decayed_attention(*ins, raw=raw, chunk_size=16,
                                         cu_seqlens=torch.tensor(bounds, device=DEVICE))
            else:
                parts = [decayed_attention(*(t[:, a:b] for t in ins[:5]), ins[5][n:n + 1], raw=raw, chunk_size=16)
                         for n, (a, b) in enumerate(zip(bounds, bounds[1:]))]
                o, S = torch.cat([p[0] for p in parts], 1), torch.cat([p[1] for p in parts], 0)
            ((o * w.to(DEVICE)).sum() + (S * wS.to(DEVICE)).sum()).backward()
            return [o, S] + [t.grad for t in ins]

        for name, a, b in zip(("o", "S", "dq", "dk", "dv", "deta", "dlog_gamma", "dS0"), run(True), run(False)):
            assert rel(a, b) <= TOL_FP32, (raw, name)
    with pytest.raises(ValueError, match="S0 must be"):
        decayed_attention(*(t.to(DEVICE) for t in leaves[:5]), leaves[5][:1].to(DEVICE),
                          cu_seqlens=torch.tensor(bounds, device=DEVICE))


def test_decayed_attention_slices_past_the_launch_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Packed sequences whose grid passes CUDA's axis limit run in groups that fit: the same outputs, final states
    and gradients as one launch (the limit lowered so that each of the three sequences is a group)."""
    from falcon_lab.kernels.common import grid
    from falcon_lab.kernels.inner_product.fused import decayed_attention

    gen = torch.Generator().manual_seed(9)
    bounds = [0, 5, 19, 20]
    leaves = [torch.randn(1, 20, H, DK, generator=gen), torch.randn(1, 20, H, DK, generator=gen),
              torch.randn(1, 20, H, DV, generator=gen), torch.rand(1, 20, H, generator=gen),
              -torch.rand(1, 20, H, generator=gen), torch.randn(3, H, DK, DV, generator=gen)]

    def run_all() -> list[torch.Tensor]:
        ins = [t.to(DEVICE).clone().requires_grad_(True) for t in leaves]
        o, S = decayed_attention(*ins, chunk_size=16, cu_seqlens=torch.tensor(bounds, device=DEVICE))
        (o.square().sum() + S.sum()).backward()
        return [o, S] + [t.grad for t in ins]

    whole = run_all()
    monkeypatch.setattr(grid, "MAX_GRID_ROWS", 4)
    assert grid.sequence_groups(bounds, H, 16) == [(0, 1), (1, 2), (2, 3)]
    for a, b in zip(whole, run_all()):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-6)


# samples by id, chunks of 16 over rows of 45 tokens: samples of 1 token (a row's first among them), a sample that
# ends a chunk, one that fills a chunk, ones that cross one or two chunk boundaries (32 tokens), a short last chunk
LENGTHS = ([1, 15, 16, 3, 1, 9], [5, 32, 1, 7])
SAMPLE_ID = torch.tensor([sum(([n] * size for n, size in enumerate(row)), []) for row in LENGTHS])


def one_row_each(q, k, v, g, **opts):
    """The float64 oracle over each sample alone."""
    o = q.new_zeros(*q.shape[:-1], v.shape[-1])
    for row, ids in enumerate(SAMPLE_ID):
        for n in ids.unique():
            at = (ids == n).nonzero().flatten().to(q.device)
            o[row:row + 1, at] = linear_attention(*(t[row:row + 1, at] for t in (q, k, v, g)), backend="recurrent",
                                                  **opts)[0]
    return o, None


@pytest.mark.parametrize(("alignment", "timing"), [("same_time", "raw"), ("same_time", "rbw"), ("shifted", "raw"),
                                                   ("shifted", "rbw")])
def test_samples_by_id_are_the_samples_run_apart_and_the_packed_sequences(alignment: str, timing: str) -> None:
    """``decayed_over_samples(..., sample_ids=True)``: the rows as they are, in chunks of 16 with the samples told
    apart by their ids, against each sample run alone by the float64 oracle and against the packed-sequence path
    (``cu_seqlens``, chunks starting at every sample): outputs and the gradients of q, k, v and the log decays.
    Shifted: every sample's first token writes nothing."""
    samples = SAMPLE_ID.to(DEVICE)
    x = case(SAMPLE_ID.shape[1], 23)
    opts = dict(scale=0.7, alignment=alignment, timing=timing)

    def on_kernels(by_id: bool):
        return lambda *a, **kw: (decayed_over_samples(*a, samples, backend="triton", chunk_size=16,
                                                      sample_ids=by_id, **kw), None)

    by_id = outputs_and_grads(x, on_kernels(True), torch.float32, **opts)
    packed = outputs_and_grads(x, on_kernels(False), torch.float32, **opts)
    ref = outputs_and_grads({n: t.to(DEVICE) for n, t in x.items()}, one_row_each, torch.float64, **opts)
    for name, a, b, c in zip(("o", "dq", "dk", "dv", "dg"), by_id, packed, ref):
        assert not torch.isnan(a).any(), name
        assert rel(a, b) <= 1e-5, f"{name}: relative error {rel(a, b):.2e} to the packed sequences"
        assert rel(a, c) <= TOL_FP32, f"{name}: relative error {rel(a, c):.2e} to the oracle"


def test_decayed_attention_by_sample_id_equals_its_packed_sequences() -> None:
    """``decayed_attention(..., sample_id=)`` with η, log γ and S0 given: each row's first sample from its row of
    S0, the others from zero, the final state each row's last sample's; the same outputs, final states and every
    gradient (η's, log γ's and S0's included) as the packed sequences of one row that start there, both timings."""
    from falcon_lab.kernels.inner_product.fused import decayed_attention

    gen = torch.Generator().manual_seed(5)
    B, T = SAMPLE_ID.shape
    leaves = [torch.randn(B, T, H, DK, generator=gen), torch.randn(B, T, H, DK, generator=gen),
              torch.randn(B, T, H, DV, generator=gen), torch.rand(B, T, H, generator=gen),
              -0.3 * torch.rand(B, T, H, generator=gen), torch.randn(B, H, DK, DV, generator=gen)]
    w, wS = torch.randn(B, T, H, DV, generator=gen), torch.randn(B, H, DK, DV, generator=gen)
    starts = torch.cat([torch.ones(B, 1, dtype=torch.bool), SAMPLE_ID[:, 1:] != SAMPLE_ID[:, :-1]], 1).flatten()
    bounds = torch.cat([starts.nonzero().flatten(), torch.tensor([B * T])]).to(DEVICE)
    firsts = [0, len(LENGTHS[0])]  # each row's first sample among the packed sequences
    for raw in (True, False):
        def run(by_id: bool) -> list[torch.Tensor]:
            ins = [t.to(DEVICE).clone().requires_grad_(True) for t in leaves]
            if by_id:
                o, S = decayed_attention(*ins, raw=raw, chunk_size=16, sample_id=SAMPLE_ID.to(DEVICE))
            else:
                S0 = ins[5].new_zeros(len(bounds) - 1, H, DK, DV).index_copy(0, torch.tensor(firsts, device=DEVICE),
                                                                             ins[5])
                o, S = decayed_attention(*(t.flatten(0, 1)[None] for t in ins[:5]), S0, raw=raw, chunk_size=16,
                                         cu_seqlens=bounds)
                o, S = o[0].unflatten(0, (B, T)), S[[firsts[1] - 1, len(bounds) - 2]]
            ((o * w.to(DEVICE)).sum() + (S * wS.to(DEVICE)).sum()).backward()
            return [o, S] + [t.grad for t in ins]

        for name, a, b in zip(("o", "S", "dq", "dk", "dv", "deta", "dlog_gamma", "dS0"), run(True), run(False)):
            assert not torch.isnan(a).any(), (raw, name)
            assert rel(a, b) <= 1e-5, (raw, name, rel(a, b))
    ins = [t.to(DEVICE) for t in leaves]
    with pytest.raises(ValueError, match="cu_seqlens or sample_id, not both"):
        decayed_attention(*ins, sample_id=SAMPLE_ID.to(DEVICE), cu_seqlens=bounds)
    with pytest.raises(ValueError, match=r"sample_id must be integers \[B, T\] = \(2, 45\)"):
        decayed_attention(*ins, sample_id=SAMPLE_ID[:, 1:].to(DEVICE))
    with pytest.raises(ValueError, match=r"S0 must be \[B, H, Dk, Dv\]"):
        decayed_attention(*ins[:5], ins[5][:1], sample_id=SAMPLE_ID.to(DEVICE))


def test_decayed_attention_by_sample_id_slices_rows_past_the_launch_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows of samples whose grid passes CUDA's axis limit run in slices of rows that fit, each with its rows'
    sample ids: the same outputs, final states and gradients as one launch (the limit lowered to a row a slice)."""
    from falcon_lab.kernels.common import grid
    from falcon_lab.kernels.inner_product.fused import decayed_attention

    gen = torch.Generator().manual_seed(6)
    B, T = SAMPLE_ID.shape
    leaves = [torch.randn(B, T, H, DK, generator=gen), torch.randn(B, T, H, DK, generator=gen),
              torch.randn(B, T, H, DV, generator=gen), torch.rand(B, T, H, generator=gen),
              -torch.rand(B, T, H, generator=gen), torch.randn(B, H, DK, DV, generator=gen)]

    def run_all() -> list[torch.Tensor]:
        ins = [t.to(DEVICE).clone().requires_grad_(True) for t in leaves]
        o, S = decayed_attention(*ins, chunk_size=16, sample_id=SAMPLE_ID.to(DEVICE))
        (o.square().sum() + S.sum()).backward()
        return [o, S] + [t.grad for t in ins]

    whole = run_all()
    monkeypatch.setattr(grid, "MAX_GRID_ROWS", 16)
    assert grid.row_groups(B, T, H, 16) == [(0, 1), (1, 2)]
    for a, b in zip(whole, run_all()):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-6)
