"""Falcon-3's window solve on a GPU: the inverse of each unit lower-triangular 64 × 64 system, in Triton.

Each chunk of Falcon-3 solves ``(I + N) Z = R`` for its pseudo-values, N strictly lower-triangular of size
C·W (64 at the default chunk of 16 tokens and window of 4), with Dv + Dk right-hand sides
(falcon_lab/kernels/window/solve.py). cuBLAS's batched triangular solve is a large part of a falcon-3 layer's GPU
time at the packed addition shape, forward and backward (the profile in records/bench/step-packed/). Here one program
inverts one system: the four 16 × 16 diagonal blocks by forward substitution in registers, then the blocks
below them, ``T_ij = −T_ii Σ_{j ≤ k < i} N_ik T_kj``, by 16 × 16 products; ``Z = T R`` is then one batched
matrix product, and the backward needs no solve at all:

    dR = Tᵀ dZ,    dN = −tril(dR Zᵀ, −1)

(what ``torch.linalg.solve_triangular(..., unitriangular=True)`` differentiates to). Products run in full
float32 (``input_precision="ieee"``, no TF32); the inverse of a unit triangular matrix whose strictly lower
entries are moderate, as Falcon-3's decayed, step-scaled Grams are, is as accurate as the substitution. Systems
smaller than 64 are padded with identity rows; larger ones are not taken here (the caller falls back).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

SIZE = 64  # the system size the kernel inverts (4 diagonal blocks of 16)


@triton.jit
def _load_block(base, i: tl.constexpr, j: tl.constexpr, rows, cols):
    return tl.load(base + (i * 16 + rows[:, None]) * 64 + j * 16 + cols[None, :])


@triton.jit
def _store_block(base, i: tl.constexpr, j: tl.constexpr, rows, cols, tile):
    tl.store(base + (i * 16 + rows[:, None]) * 64 + j * 16 + cols[None, :], tile)


@triton.jit
def _diag_inverse(n_ii, rows, cols):
    """The inverse of I + strict_lower(n_ii), 16 × 16, by forward substitution row after row."""
    n_ii = tl.where(cols[None, :] < rows[:, None], n_ii, 0.0)
    t = tl.where(cols[None, :] == rows[:, None], 1.0, 0.0)
    for r in tl.static_range(1, 16):
        n_r = tl.sum(tl.where(rows[:, None] == r, n_ii, 0.0), axis=0)  # row r of N (columns < r)
        # row r of T: e_r − Σ_{k<r} N_rk T_k (the rows k < r of T are final)
        t_r = tl.sum(n_r[:, None] * t, axis=0)
        t = tl.where(rows[:, None] == r, t - t_r[None, :], t)
    return t


@triton.jit
def _tril_inverse64_kernel(n_ptr, t_ptr):
    pid = tl.program_id(0)
    src = n_ptr + pid.to(tl.int64) * 4096
    dst = t_ptr + pid.to(tl.int64) * 4096
    rows = tl.arange(0, 16)
    cols = tl.arange(0, 16)
    t00 = _diag_inverse(_load_block(src, 0, 0, rows, cols), rows, cols)
    t11 = _diag_inverse(_load_block(src, 1, 1, rows, cols), rows, cols)
    t22 = _diag_inverse(_load_block(src, 2, 2, rows, cols), rows, cols)
    t33 = _diag_inverse(_load_block(src, 3, 3, rows, cols), rows, cols)
    n10 = _load_block(src, 1, 0, rows, cols)
    n20 = _load_block(src, 2, 0, rows, cols)
    n21 = _load_block(src, 2, 1, rows, cols)
    n30 = _load_block(src, 3, 0, rows, cols)
    n31 = _load_block(src, 3, 1, rows, cols)
    n32 = _load_block(src, 3, 2, rows, cols)
    # T_ij = −T_ii Σ_{j ≤ k < i} N_ik T_kj, one sub-diagonal after the other
    t10 = -tl.dot(t11, tl.dot(n10, t00, input_precision="ieee"), input_precision="ieee")
    t21 = -tl.dot(t22, tl.dot(n21, t11, input_precision="ieee"), input_precision="ieee")
    t32 = -tl.dot(t33, tl.dot(n32, t22, input_precision="ieee"), input_precision="ieee")
    t20 = -tl.dot(t22, tl.dot(n20, t00, input_precision="ieee") + tl.dot(n21, t10, input_precision="ieee"),
                  input_precision="ieee")
    t31 = -tl.dot(t33, tl.dot(n31, t11, input_precision="ieee") + tl.dot(n32, t21, input_precision="ieee"),
                  input_precision="ieee")
    acc = (tl.dot(n30, t00, input_precision="ieee") + tl.dot(n31, t10, input_precision="ieee")
           + tl.dot(n32, t20, input_precision="ieee"))
    t30 = -tl.dot(t33, acc, input_precision="ieee")
    zero = tl.zeros([16, 16], tl.float32)
    _store_block(dst, 0, 0, rows, cols, t00)
    _store_block(dst, 0, 1, rows, cols, zero)
    _store_block(dst, 0, 2, rows, cols, zero)
    _store_block(dst, 0, 3, rows, cols, zero)
    _store_block(dst, 1, 0, rows, cols, t10)
    _store_block(dst, 1, 1, rows, cols, t11)
    _store_block(dst, 1, 2, rows, cols, zero)
    _store_block(dst, 1, 3, rows, cols, zero)
    _store_block(dst, 2, 0, rows, cols, t20)
    _store_block(dst, 2, 1, rows, cols, t21)
    _store_block(dst, 2, 2, rows, cols, t22)
    _store_block(dst, 2, 3, rows, cols, zero)
    _store_block(dst, 3, 0, rows, cols, t30)
    _store_block(dst, 3, 1, rows, cols, t31)
    _store_block(dst, 3, 2, rows, cols, t32)
    _store_block(dst, 3, 3, rows, cols, t33)


def unit_lower_inverse(system: Tensor) -> Tensor:
    """``(I + strict_lower(system))⁻¹`` for ``[..., n, n]`` float32 systems, n ≤ 64 (only the strictly lower
    part is read, as by ``solve_triangular(..., unitriangular=True)``); no autograd."""
    n = system.shape[-1]
    if system.shape[-2] != n or not 1 <= n <= SIZE:
        raise ValueError(f"unit_lower_inverse takes square systems of at most {SIZE} x {SIZE}, got "
                         f"{tuple(system.shape)}")
    if system.dtype != torch.float32:
        raise ValueError(f"unit_lower_inverse takes float32 systems, got {system.dtype}")
    flat = system.detach().reshape(-1, n, n)
    if n < SIZE:  # identity rows and columns below: the inverse's top-left n × n block is the answer
        flat = torch.nn.functional.pad(flat, (0, SIZE - n, 0, SIZE - n))
    flat = flat.contiguous()
    out = torch.empty_like(flat)
    if flat.shape[0]:
        _tril_inverse64_kernel[(flat.shape[0],)](flat, out)
    return out[:, :n, :n].reshape(system.shape)


class _UnitLowerSolve(torch.autograd.Function):
    @staticmethod
    def forward(ctx, system: Tensor, rhs: Tensor) -> Tensor:
        inverse = unit_lower_inverse(system)
        z = inverse @ rhs
        ctx.save_for_backward(inverse, z)
        return z

    @staticmethod
    def backward(ctx, dz: Tensor) -> tuple[Tensor, Tensor]:
        inverse, z = ctx.saved_tensors
        drhs = inverse.transpose(-1, -2) @ dz
        dsystem = -(drhs @ z.transpose(-1, -2)).tril(-1)
        return dsystem, drhs


def unit_lower_solve(system: Tensor, rhs: Tensor) -> Tensor:
    """``Z`` with ``(I + strict_lower(system)) Z = rhs``: ``[..., n, n]`` and ``[..., n, D]``, float32, n ≤ 64;
    the same values and gradients as ``torch.linalg.solve_triangular(system, rhs, upper=False,
    unitriangular=True)``."""
    return _UnitLowerSolve.apply(system, rhs)
