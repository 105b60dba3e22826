"""falcon-3a's band in Triton (``falcon_lab.kernels.window.triton_band.band_read``) against the same sum in PyTorch: output
and every gradient, RAW and RBW, windows of 2 to 5, head widths that are no power of two, a length that is no
multiple of the kernels' block. Every buffer the kernels write is allocated full of NaN here. Without CUDA the
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


def reference(q: Tensor, x: Tensor, y: Tensor, coef: Tensor, lag: int) -> Tensor:
    T, W = q.shape[1], coef.shape[-1] + 1
    o = torch.zeros(*q.shape[:3], y.shape[-1], dtype=torch.float64, device=q.device)
    for d in range(W - 1):
        start = W - 1 - d - lag
        xd, yd = x[:, start:start + T], y[:, start:start + T]
        o = o + (coef[..., d] * (xd * q).sum(-1))[..., None] * yd
    return o


@pytest.mark.parametrize("lag", [0, 1])
@pytest.mark.parametrize("W, Dk, Dv", [(2, 12, 20), (3, 12, 20), (5, 12, 20), (3, 136, 8)])
def test_band_read_matches_its_sum(W: int, Dk: int, Dv: int, lag: int) -> None:
    """(The last case: a key width past 128, read in blocks of 16 tokens.)"""
    from falcon_lab.kernels.window.triton_band import band_read

    g = torch.Generator().manual_seed(10 * W + lag)
    B, T, H = 2, 45, 3
    leaves = [torch.randn(B, T, H, Dk, generator=g), torch.randn(B, T + W - 1, H, Dk, generator=g),
              torch.randn(B, T + W - 1, H, Dv, generator=g), torch.rand(B, T, H, W - 1, generator=g)]
    w = torch.randn(B, T, H, Dv, generator=g)
    results = []
    for fn, dtype in ((band_read, torch.float32), (reference, torch.float64)):
        ins = [t.to(DEVICE, dtype).detach().clone().requires_grad_() for t in leaves]
        o = fn(*ins, lag)
        (o * w.to(DEVICE, o.dtype)).sum().backward()
        results.append([o.detach().double().cpu()] + [t.grad.double().cpu() for t in ins])
    for name, got, want in zip(("o", "dq", "dx", "dy", "dcoef"), *results):
        assert torch.isfinite(got).all(), name
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=name)


def test_band_read_refuses_shapes_that_do_not_fit() -> None:
    from falcon_lab.kernels.window.triton_band import band_read

    q = torch.zeros(1, 8, 2, 4)
    with pytest.raises(ValueError, match="do not fit"):
        band_read(q, torch.zeros(1, 8, 2, 4), torch.zeros(1, 11, 2, 4), torch.zeros(1, 8, 2, 3), 0)
    with pytest.raises(ValueError, match="lag must be 0"):
        band_read(q, torch.zeros(1, 11, 2, 4), torch.zeros(1, 11, 2, 4), torch.zeros(1, 8, 2, 3), 2)
