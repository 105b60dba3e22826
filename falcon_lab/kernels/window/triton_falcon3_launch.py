"""Host side of the falcon-3 kernels: the chunk geometry, the launches, and the autograd op over them.

``Falcon3Chunks`` takes what ``falcon_lab/kernels/window/fused.py`` prepares in PyTorch (q per token, the window slots X, V
laid out as rows, a = η / B_t and log γ per token, S_0) and returns (o, final S) with a Triton forward and
backward: dq, dX, dV, da, d log γ and dS_0. The matmul precision follows the falcon-1 kernels'
(``falcon_lab.kernels.regression.triton_launch.MATMUL_PRECISION`` / ``SOLVE_PRECISION``).
"""

from __future__ import annotations

import torch
import triton
from torch import Tensor

from falcon_lab.kernels.common import triton_helpers as helpers
from falcon_lab.kernels.common.config import FUSED_MAX_WINDOW
from falcon_lab.kernels.common.triton_helpers import next_power_of_2
from falcon_lab.kernels.regression import triton_launch
from falcon_lab.kernels.regression.triton_launch import precision, solve_precision
from falcon_lab.kernels.window.triton_falcon3 import f3_prep_kernel, f3_read_kernel, f3_state_kernel
from falcon_lab.kernels.window.triton_falcon3_bwd import f3_dstate_kernel, f3_grad_kernel

MAX_ROWS = FUSED_MAX_WINDOW  # slot rows of one chunk (the block-strict system's inverse is [R, R] in registers)


def slots(window: int) -> int:
    """WP: the window padded to a power of two (the kernels' slots per token)."""
    return 1 << (window - 1).bit_length()


def geometry(window: int, chunk_size: int) -> dict:
    """The chunk of the kernels: R = min(chunk_size · WP, 64) slot rows, C = R / WP tokens, tiles of CT tokens."""
    WP = slots(window)
    R = min(chunk_size * WP, MAX_ROWS)
    C = R // WP
    return dict(C=C, CT=max(C, 16), R=R, WP=WP)


def _config(kernel: str, Dk: int, Dv: int) -> dict:
    """The launch of ``f3_<kernel>``: ``_default_config``'s, with ``triton_launch.LAUNCH_OVERRIDES``' over it."""
    return {**_default_config(kernel, Dk, Dv), **triton_launch.LAUNCH_OVERRIDES.get(f"f3_{kernel}", {})}


def _default_config(kernel: str, Dk: int, Dv: int) -> dict:
    """Block sizes as the falcon-1 kernels' at chunks of 64 rows, in 4 warps: with 8, the first H200 run (Triton 3.6)
    of the UT-transform kernel at 64 rows and tf32x3 products hit an illegal memory access, and in one more run
    wrote wrong outputs (8 warps with "ieee" products, and 4 warps with tf32x3, ran forward and backward there at
    W = 4 with o within 5e-7 of the oracle)."""
    BK, BV = min(64, next_power_of_2(Dk)), min(64, next_power_of_2(Dv))
    BKf = next_power_of_2(Dk)
    wide = BKf > 64
    if kernel in ("prep", "read"):
        return dict(BK=BK, BV=BV, num_warps=4)
    if kernel in ("state", "dstate"):
        return dict(BK=BKf, BV=min(next_power_of_2(Dv), 64 if not wide else 32 if BKf <= 128 else 16), num_warps=4)
    return dict(BK=32 if wide else BK, BV=min(32, BV), num_warps=4)  # grad


def _f32(*shape: int, device: torch.device) -> Tensor:
    return helpers.new_buffer(*shape, dtype=torch.float32, device=device)


def _like(t: Tensor) -> Tensor:
    return helpers.new_buffer(*t.shape, dtype=t.dtype, device=t.device)


def _precision(dtype: torch.dtype, Dk: int, Dv: int) -> tuple[str, str]:
    """(products, inverse) precision: the falcon-1 kernels' for the dtype, except bf16 heads narrower than 32,
    which take fp32 operands (tf32x3): at Dk = Dv = 16 the bf16 products faulted with an illegal memory access on
    an H200 under Triton 3.6 (records/bench/kernels-2026-12-03), where the same kernels at 64 and 128, and in fp32
    at 16, ran."""
    if dtype == torch.bfloat16 and min(Dk, Dv) < 32:
        dtype = torch.float32
    return precision(dtype), solve_precision(dtype)


def _samples(q: Tensor, sid: Tensor | None) -> tuple[Tensor, dict]:
    """The ids the kernels read (q, never read, without samples) and their flag."""
    return (q if sid is None else sid), dict(SAMPLES=sid is not None)


def f3_forward(q, X, V, a, lg, S0, rbw, geo, sid=None):
    """(o, final S, (A, U, h)) for the backward; ``sid`` ``[B, T]`` int32: rows of fresh samples by id."""
    B, T, H, Dk = q.shape
    Dv, dev, rows = V.shape[-1], q.device, X.shape[0] * X.shape[1]
    NT = triton.cdiv(T, geo["C"])
    prec, solve = _precision(q.dtype, Dk, Dv)
    sid, samples = _samples(q, sid)
    shape = dict(T=T, NT=NT, H=H, Dk=Dk, Dv=Dv, **geo, **samples)
    A = _f32(rows, H, geo["R"], device=dev)
    Wm = helpers.new_buffer(rows, H, Dk, dtype=torch.bfloat16 if prec == "bf16" else torch.float32, device=dev)
    Ut = _f32(rows, H, Dv, device=dev)
    f3_prep_kernel[(B * NT, H)](X, V, a, lg, sid, A, Wm, Ut, PREC=prec, SOLVE_PREC=solve,
                                DOUBLING=triton_launch.INVERSE == "doubling", **shape, **_config("prep", Dk, Dv))
    U = _f32(rows, H, Dv, device=dev)
    h = _f32(B * NT, H, Dk, Dv, device=dev)
    Sf = _f32(B, H, Dk, Dv, device=dev)
    conf = _config("state", Dk, Dv)
    f3_state_kernel[(triton.cdiv(Dv, conf["BV"]), B * H)](X, a, lg, sid, Wm, Ut, S0, h, U, Sf, PREC=prec, **shape,
                                                          **conf)
    del Wm, Ut
    o = helpers.new_buffer(B, T, H, Dv, dtype=q.dtype, device=dev)
    conf = _config("read", Dk, Dv)
    f3_read_kernel[(B * NT, triton.cdiv(Dv, conf["BV"]), H)](q, X, a, lg, sid, h, U, o, RBW=rbw, BACKWARD=False,
                                                             PREC=prec, **shape, **conf)
    return o, Sf, (A, U, h)


def f3_backward(q, X, V, a, lg, S0, do, dSf, rbw, geo, kept, sid=None):
    """dq, dX, dV, da, d log γ, dS_0."""
    A, U, h = kept
    B, T, H, Dk = q.shape
    Dv, dev, rows = V.shape[-1], q.device, X.shape[0] * X.shape[1]
    NT = triton.cdiv(T, geo["C"])
    prec = _precision(q.dtype, Dk, Dv)[0]
    sid, samples = _samples(q, sid)
    shape = dict(T=T, NT=NT, H=H, Dk=Dk, Dv=Dv, **geo, **samples)
    dul = _f32(rows, H, Dv, device=dev)
    conf = _config("read", Dk, Dv)
    f3_read_kernel[(B * NT, triton.cdiv(Dv, conf["BV"]), H)](q, X, a, lg, sid, h, do, dul, RBW=rbw, BACKWARD=True,
                                                             PREC=prec, **shape, **conf)
    dh = _f32(*h.shape, device=dev)
    dB = _f32(rows, H, Dv, device=dev)
    dS0 = _f32(*S0.shape, device=dev)
    conf = _config("dstate", Dk, Dv)
    f3_dstate_kernel[(triton.cdiv(Dv, conf["BV"]), B * H)](
        q, X, a, lg, sid, do, dul, A, dSf if dSf is not None else dS0, dh, dB, dS0, RBW=rbw, HAS_DSF=dSf is not None,
        PREC=prec, **shape, **conf)
    del dul
    dq, dX, dV = _like(q), _like(X), _like(V)
    da, dlg = _f32(*a.shape, device=dev), _f32(*lg.shape, device=dev)
    f3_grad_kernel[(B * NT, H)](q, X, V, a, lg, sid, do, U, dB, h, dh, dq, dX, dV, da, dlg, RBW=rbw, PREC=prec,
                                **shape, **_config("grad", Dk, Dv))
    return dq, dX, dV, da, dlg, dS0


class Falcon3Chunks(torch.autograd.Function):
    """(q ``[B, T, H, Dk]``, X ``[B, T·WP, H, Dk]``, V ``[B, T·WP, H, Dv]``, a, log γ ``[B, T, H]`` fp32, S_0 fp32)
    -> (o ``[B, T, H, Dv]`` in q's dtype, final S fp32), forward and backward in Triton. ``sid`` ``[B, T]`` int32
    (or None): the rows' samples apart, each fresh (S_0 then reaches each row's first sample alone, and the final S is
    each row's last sample's)."""

    @staticmethod
    def forward(ctx, q, X, V, a, lg, S0, rbw, geo, sid=None):
        q, X, V, a, lg, S0 = (t.contiguous() for t in (q, X, V, a, lg, S0))
        o, Sf, kept = f3_forward(q, X, V, a, lg, S0, rbw, geo, sid)
        ctx.save_for_backward(q, X, V, a, lg, S0, *kept)
        ctx.rbw, ctx.geo, ctx.sid = rbw, geo, sid
        return o, Sf

    @staticmethod
    def backward(ctx, do, dSf):
        q, X, V, a, lg, S0, *kept = ctx.saved_tensors
        do = q.new_zeros(*q.shape[:3], V.shape[-1]) if do is None else do.contiguous()
        grads = f3_backward(q, X, V, a, lg, S0, do, None if dSf is None else dSf.contiguous(), ctx.rbw, ctx.geo,
                            tuple(kept), ctx.sid)
        return (*grads, None, None, None)
