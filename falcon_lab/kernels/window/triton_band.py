"""falcon-3a's band in Triton: the reads of the W − 1 pairs still inside each token's window.

``falcon_lab/kernels/window/fused.py`` splits falcon-3a's read into a delayed decayed linear attention (falcon-1a's kernels)
and a band over the pairs the window still holds:

    o_t += Σ_{d<W−1} c_d(t − lag) (x_{r_d(t)} · q_t) y_{r_d(t)},    r_d(t) = t + W − 1 − d − lag,

with x, y the extended pairs ``[B, T + W − 1, H, D]`` (the state's window tail in front; or ``[B, T, H, D]``, rows
that begin fresh, the rows in front of each read as empty rather than padded in a copy), c ``[B, T, H, W − 1]``
the window coefficients already moved by ``lag`` (0 for RAW, 1 for RBW) and zero where no token stands. Written
in PyTorch the band is W − 1 rounds of full-size float32 products, slices and, backward, slice gradients the size
of the whole extended arrays: with it, the PyTorch around falcon-3a's kernels writes 4.32 GB of tensors forward and
backward at 8 × 2048 × 12 × 64 and W = 4, and 2.18 GB with this kernel (records/bench/falcon3a-glue/). Here one program
reads a block of tokens once forward; backward, one program per block of rows gathers every token that reads its
row, so no gradient is accumulated by atomics:

    dq_t = Σ_d c_d (y_r · do_t) x_r,    dc_d(t) = (x_r · q_t)(y_r · do_t),
    dx_r = Σ_d c_d(t) (y_r · do_t) q_t,    dy_r = Σ_d c_d(t) (x_r · q_t) do_t,    t = r − (W − 1 − d − lag).

Everything is float32 in registers; q and do are read in their own dtype. The forward can add the delayed pass's
output to the band in the same pass and write the sum in that output's dtype (no float32 o of its own written,
read back and cast).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from falcon_lab.kernels.common import triton_helpers
from falcon_lab.kernels.common.triton_helpers import next_power_of_2

BLOCK_T = 32  # tokens (forward) or rows (backward) a program takes; 16 past heads of 128 (its tiles are [BT, D])


def _block(Dk: int, Dv: int) -> int:
    return BLOCK_T if max(Dk, Dv) <= 128 else BLOCK_T // 2


@triton.jit
def _rows(ptr, i_b, rows, n_rows, i_h, H, cols, D: tl.constexpr, mask):
    """Rows ``rows`` of head ``i_h`` of batch ``i_b`` of a ``[B, n_rows, H, D]`` tensor, float32 ``[len, BD]``."""
    offs = ((i_b * n_rows + rows.to(tl.int64))[:, None] * H + i_h) * D + cols[None, :]
    return tl.load(ptr + offs, mask=mask[:, None] & (cols[None, :] < D), other=0.0).to(tl.float32)


@triton.jit
def _band_fwd_kernel(q_ptr, x_ptr, y_ptr, c_ptr, p_ptr, o_ptr, T, H, DK: tl.constexpr, DV: tl.constexpr,
                     W: tl.constexpr, LAG: tl.constexpr, TAIL: tl.constexpr, PLUS: tl.constexpr, BT: tl.constexpr,
                     BK: tl.constexpr, BV: tl.constexpr):
    i_bh = tl.program_id(0).to(tl.int64)
    i_b, i_h = i_bh // H, i_bh % H
    t = tl.program_id(1) * BT + tl.arange(0, BT)
    ck, cv = tl.arange(0, BK), tl.arange(0, BV)
    mt = t < T
    TE = T + TAIL
    q = _rows(q_ptr, i_b, t, T, i_h, H, ck, DK, mt)
    offs = ((i_b * T + t)[:, None] * H + i_h) * DV + cv[None, :]
    mo = mt[:, None] & (cv[None, :] < DV)
    if PLUS:
        acc = tl.load(p_ptr + offs, mask=mo, other=0.0).to(tl.float32)
    else:
        acc = tl.zeros([BT, BV], dtype=tl.float32)
    for d in tl.static_range(W - 1):
        r = t + (TAIL - d - LAG)  # the row pair t − d − lag stands in (none in front of a row without its tail)
        m = mt & (r >= 0)
        x = _rows(x_ptr, i_b, r, TE, i_h, H, ck, DK, m)
        y = _rows(y_ptr, i_b, r, TE, i_h, H, cv, DV, m)
        c = tl.load(c_ptr + ((i_b * T + t) * H + i_h) * (W - 1) + d, mask=mt, other=0.0)
        acc += (c * tl.sum(x * q, axis=1))[:, None] * y
    tl.store(o_ptr + offs, acc.to(o_ptr.dtype.element_ty), mask=mo)


@triton.jit
def _band_bwd_kernel(q_ptr, x_ptr, y_ptr, c_ptr, do_ptr, dq_ptr, dx_ptr, dy_ptr, dc_ptr, T, H,
                     DK: tl.constexpr, DV: tl.constexpr, W: tl.constexpr, LAG: tl.constexpr, TAIL: tl.constexpr,
                     BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    i_bh = tl.program_id(0).to(tl.int64)
    i_b, i_h = i_bh // H, i_bh % H
    blk = tl.program_id(1) * BT + tl.arange(0, BT)
    ck, cv = tl.arange(0, BK), tl.arange(0, BV)
    TE = T + TAIL
    # the block as tokens t: dq_t and dc_d(t)
    mt = blk < T
    q = _rows(q_ptr, i_b, blk, T, i_h, H, ck, DK, mt)
    do = _rows(do_ptr, i_b, blk, T, i_h, H, cv, DV, mt)
    dq = tl.zeros([BT, BK], dtype=tl.float32)
    for d in tl.static_range(W - 1):
        r = blk + (TAIL - d - LAG)
        m = mt & (r >= 0)
        x = _rows(x_ptr, i_b, r, TE, i_h, H, ck, DK, m)
        y = _rows(y_ptr, i_b, r, TE, i_h, H, cv, DV, m)
        c = tl.load(c_ptr + ((i_b * T + blk) * H + i_h) * (W - 1) + d, mask=mt, other=0.0)
        yd = tl.sum(y * do, axis=1)
        dq += (c * yd)[:, None] * x
        tl.store(dc_ptr + ((i_b * T + blk) * H + i_h) * (W - 1) + d, tl.sum(x * q, axis=1) * yd, mask=mt)
    tl.store(dq_ptr + ((i_b * T + blk)[:, None] * H + i_h) * DK + ck[None, :], dq.to(dq_ptr.dtype.element_ty),
             mask=mt[:, None] & (ck[None, :] < DK))
    # the block as rows r of the pairs: every token that reads row r
    mr = blk < TE
    x = _rows(x_ptr, i_b, blk, TE, i_h, H, ck, DK, mr)
    y = _rows(y_ptr, i_b, blk, TE, i_h, H, cv, DV, mr)
    dx = tl.zeros([BT, BK], dtype=tl.float32)
    dy = tl.zeros([BT, BV], dtype=tl.float32)
    for d in tl.static_range(W - 1):
        t = blk - (TAIL - d - LAG)
        m = mr & (t >= 0) & (t < T)
        q_t = _rows(q_ptr, i_b, t, T, i_h, H, ck, DK, m)
        do_t = _rows(do_ptr, i_b, t, T, i_h, H, cv, DV, m)
        c = tl.load(c_ptr + ((i_b * T + t) * H + i_h) * (W - 1) + d, mask=m, other=0.0)
        dx += (c * tl.sum(y * do_t, axis=1))[:, None] * q_t
        dy += (c * tl.sum(x * q_t, axis=1))[:, None] * do_t
    rows = (i_b * TE + blk)[:, None] * H + i_h
    tl.store(dx_ptr + rows * DK + ck[None, :], dx.to(dx_ptr.dtype.element_ty), mask=mr[:, None] & (ck[None, :] < DK))
    tl.store(dy_ptr + rows * DV + cv[None, :], dy.to(dy_ptr.dtype.element_ty), mask=mr[:, None] & (cv[None, :] < DV))


def _grid(B: int, H: int, n: int, block: int) -> tuple[int, int]:
    """B·H on axis 0 (up to 2³¹ − 1 programs), the blocks of n tokens or rows on axis 1."""
    return B * H, triton.cdiv(n, block)


def band_forward(q: Tensor, x: Tensor, y: Tensor, coef: Tensor, lag: int, plus: Tensor | None) -> Tensor:
    """The band's read (``band_read``'s), contiguous inputs, coef float32: o float32, or plus's dtype with ``plus``
    added."""
    B, T, H, Dk = q.shape
    Dv, W = y.shape[-1], coef.shape[-1] + 1
    o = triton_helpers.new_buffer(B, T, H, Dv, dtype=torch.float32 if plus is None else plus.dtype, device=q.device)
    BT = _block(Dk, Dv)
    _band_fwd_kernel[_grid(B, H, T, BT)](q, x, y, coef, o if plus is None else plus, o, T, H, DK=Dk, DV=Dv, W=W,
                                         LAG=lag, TAIL=x.shape[1] - T, PLUS=plus is not None, BT=BT,
                                         BK=next_power_of_2(Dk), BV=next_power_of_2(Dv))
    return o


def band_backward(q: Tensor, x: Tensor, y: Tensor, coef: Tensor, lag: int, do: Tensor) -> tuple[Tensor, ...]:
    """dq, dx, dy (each in its input's dtype) and dcoef of the band's read, from do."""
    B, T, H, Dk = q.shape
    Dv, W = y.shape[-1], coef.shape[-1] + 1
    tail = x.shape[1] - T
    new = triton_helpers.new_buffer
    dq = new(B, T, H, Dk, dtype=q.dtype, device=q.device)
    dx = new(*x.shape, dtype=x.dtype, device=q.device)
    dy = new(*y.shape, dtype=y.dtype, device=q.device)
    dc = new(*coef.shape, dtype=coef.dtype, device=q.device)
    BT = _block(Dk, Dv)
    _band_bwd_kernel[_grid(B, H, T + tail, BT)](q, x, y, coef, do.contiguous(), dq, dx, dy, dc, T, H, DK=Dk, DV=Dv,
                                                W=W, LAG=lag, TAIL=tail, BT=BT, BK=next_power_of_2(Dk),
                                                BV=next_power_of_2(Dv))
    return dq, dx, dy, dc


class _Band(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q: Tensor, x: Tensor, y: Tensor, coef: Tensor, lag: int, plus: Tensor | None) -> Tensor:
        ctx.save_for_backward(q, x, y, coef)
        ctx.lag = lag
        return band_forward(q, x, y, coef, lag, plus)

    @staticmethod
    def backward(ctx, do: Tensor) -> tuple[Tensor | None, ...]:
        q, x, y, coef = ctx.saved_tensors
        dq, dx, dy, dc = band_backward(q, x, y, coef, ctx.lag, do)
        return dq, dx, dy, dc, None, do if ctx.needs_input_grad[5] else None


def band_read(q: Tensor, x: Tensor, y: Tensor, coef: Tensor, lag: int, plus: Tensor | None = None) -> Tensor:
    """Σ_d coef[..., d] (x_{t+E−d−lag} · q_t) y_{t+E−d−lag} for every token t, float32 ``[B, T, H, Dv]``; with
    ``plus`` ``[B, T, H, Dv]`` that tensor added to it, in plus's dtype (the sum in float32, one pass over memory).

    q ``[B, T, H, Dk]`` (any float dtype); x ``[B, T + E, H, Dk]`` and y ``[B, T + E, H, Dv]`` the pairs, E = W − 1
    (the extended pairs: the state's window tail in front) or 0 (each row fresh: nothing in front of its first pair,
    no padded copy made); coef ``[B, T, H, W − 1]`` float32; lag 0 (RAW) or 1 (RBW). The gradients come back in
    their inputs' dtypes. Differentiable in q, x, y, coef and plus."""
    B, T, H, Dk = q.shape
    W = coef.shape[-1] + 1
    if (x.shape not in ((B, T + W - 1, H, Dk), (B, T, H, Dk)) or y.shape[:3] != x.shape[:3]
            or coef.shape[:3] != (B, T, H) or (plus is not None and plus.shape != (B, T, H, y.shape[-1]))):
        raise ValueError(f"band_read: q {list(q.shape)}, x {list(x.shape)}, y {list(y.shape)}, coef "
                         f"{list(coef.shape)} and plus {None if plus is None else list(plus.shape)} do not fit "
                         f"q [B, T, H, Dk], x and y [B, T + W − 1 or T, H, D], coef [B, T, H, W − 1], plus "
                         f"[B, T, H, Dv]")
    if lag not in (0, 1):
        raise ValueError(f"band_read: lag must be 0 (RAW) or 1 (RBW), got {lag!r}")
    return _Band.apply(q.contiguous(), x.contiguous(), y.contiguous(), coef.to(torch.float32).contiguous(), lag,
                       None if plus is None else plus.contiguous())
