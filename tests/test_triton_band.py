"""falcon-3a's band in Triton (``falcon_lab.kernels.window.triton_band.band_read``) against the same sum in PyTorch:
output and every gradient, RAW and RBW, with the state's window tail in front of the pairs or rows that begin fresh,
with and without the delayed pass's output added in the same pass, windows of 2 to 5, head widths that are no power
of two, a length that is no multiple of the kernels' block. Every buffer the kernels write is allocated full of NaN here. Without CUDA the
kernels run in Triton's interpreter."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from falcon_lab.kernels.common import triton_helpers

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(autouse=True)
def poisoned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(triton_helpers, "new_buffer", lambda *shape, dtype, device: torch.full(
        shape, float("nan"), dtype=dtype, device=device))


def reference(q: Tensor, x: Tensor, y: Tensor, coef: Tensor, lag: int, plus: Tensor | None = None) -> Tensor:
    T, W = q.shape[1], coef.shape[-1] + 1
    if x.shape[1] == T:  # rows that begin fresh: W − 1 empty rows in front
        x, y = (torch.cat([t.new_zeros(t.shape[0], W - 1, *t.shape[2:]), t], dim=1) for t in (x, y))
    o = torch.zeros(*q.shape[:3], y.shape[-1], dtype=torch.float64, device=q.device)
    for d in range(W - 1):
        start = W - 1 - d - lag
        xd, yd = x[:, start:start + T], y[:, start:start + T]
        o = o + (coef[..., d] * (xd * q).sum(-1))[..., None] * yd
    return o if plus is None else o + plus


@pytest.mark.parametrize("lag", [0, 1])
@pytest.mark.parametrize("W, Dk, Dv, tail, plus", [(2, 12, 20, True, False), (3, 12, 20, True, False),
                                                   (5, 12, 20, True, True), (3, 136, 8, True, False),
                                                   (2, 12, 20, False, True), (4, 12, 20, False, True),
                                                   (3, 12, 20, False, False)])
def test_band_read_matches_its_sum(W: int, Dk: int, Dv: int, tail: bool, plus: bool, lag: int) -> None:
    """x and y with the state's window tail in front (``tail``) or rows that begin fresh, with a tensor added in the
    same pass (``plus``) or not. (The fourth case: a key width past 128, read in blocks of 16 tokens.)"""
    from falcon_lab.kernels.window.triton_band import band_read

    g = torch.Generator().manual_seed(10 * W + lag + 100 * tail + 1000 * plus)
    B, T, H = 2, 45, 3
    rows = T + W - 1 if tail else T
    leaves = [torch.randn(B, T, H, Dk, generator=g), torch.randn(B, rows, H, Dk, generator=g),
              torch.randn(B, rows, H, Dv, generator=g), torch.rand(B, T, H, W - 1, generator=g)]
    if plus:
        leaves.append(torch.randn(B, T, H, Dv, generator=g))
    w = torch.randn(B, T, H, Dv, generator=g)
    results = []
    for fn, dtype in ((band_read, torch.float32), (reference, torch.float64)):
        ins = [t.to(DEVICE, dtype).detach().clone().requires_grad_() for t in leaves]
        o = fn(*ins[:4], lag, *ins[4:])
        (o * w.to(DEVICE, o.dtype)).sum().backward()
        results.append([o.detach().double().cpu()] + [t.grad.double().cpu() for t in ins])
    for name, got, want in zip(("o", "dq", "dx", "dy", "dcoef", "dplus"), *results):
        assert torch.isfinite(got).all(), name
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=name)


def test_band_read_adds_in_float32_and_writes_in_the_added_dtype() -> None:
    """With a bf16 ``plus`` the output is bf16: the band's float32 sum and plus added before the one rounding."""
    from falcon_lab.kernels.window.triton_band import band_read

    g = torch.Generator().manual_seed(3)
    B, T, H, D, W = 1, 20, 2, 8, 3
    q, x, y = (torch.randn(B, T, H, D, generator=g).to(DEVICE) for _ in range(3))
    coef = torch.rand(B, T, H, W - 1, generator=g).to(DEVICE)
    plus = torch.randn(B, T, H, D, generator=g).to(DEVICE, torch.bfloat16)
    got = band_read(q, x, y, coef, 0, plus=plus)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, (band_read(q, x, y, coef, 0) + plus.float()).to(torch.bfloat16))


def test_band_read_refuses_shapes_that_do_not_fit() -> None:
    from falcon_lab.kernels.window.triton_band import band_read

    q = torch.zeros(1, 8, 2, 4)
    with pytest.raises(ValueError, match="do not fit"):
        band_read(q, torch.zeros(1, 8, 2, 4), torch.zeros(1, 11, 2, 4), torch.zeros(1, 8, 2, 3), 0)
    with pytest.raises(ValueError, match="do not fit"):
        band_read(q, torch.zeros(1, 10, 2, 4), torch.zeros(1, 10, 2, 4), torch.zeros(1, 8, 2, 3), 0)
    with pytest.raises(ValueError, match="do not fit"):
        band_read(q, torch.zeros(1, 8, 2, 4), torch.zeros(1, 8, 2, 4), torch.zeros(1, 8, 2, 3), 0,
                  torch.zeros(1, 8, 2))
    with pytest.raises(ValueError, match="lag must be 0"):
        band_read(q, torch.zeros(1, 11, 2, 4), torch.zeros(1, 11, 2, 4), torch.zeros(1, 8, 2, 3), 2)
