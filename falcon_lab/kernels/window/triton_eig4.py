"""The top eigenvalue of many small symmetric matrices (Falcon-3's μ_t), in one Triton kernel.

Falcon-3 sets its step size from μ_t, the largest eigenvalue of each token's window Gram ``X Xᵀ`` (W × W, W
the window of pairs, 4 by default): at the packed addition shape 393,216 matrices of 4 × 4 a layer. cuSOLVER's
batched ``eigvalsh`` takes them in slices of at most ~32k, a large part of a falcon-3 layer's GPU time (the
profile in records/bench/step-packed/). Here each program takes ``BLOCK`` matrices, one per lane,
and runs cyclic Jacobi sweeps on its ten distinct entries in registers: each sweep zeroes the six
off-diagonal pairs in turn with a plane rotation, and the rotations accumulated give the eigenvectors. Jacobi
converges quadratically once the off-diagonal mass is small; six sweeps leave a 4 × 4 matrix diagonal to
float32 rounding (the tests hold it to ``eigvalsh``). Matrices smaller than 4 × 4 are padded to it with
decoupled rows and columns whose eigenvalues lie below all of the matrix's.

The backward is that of ``eigvalsh`` for the top eigenvalue: ``∂λ_max / ∂G = u uᵀ`` with u its unit
eigenvector, which the forward keeps.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

SWEEPS = 6
BLOCK = 256


@triton.jit
def _rotate(app, aqq, apq, arp, arq, asp, asq, v0p, v0q, v1p, v1q, v2p, v2q, v3p, v3q):
    """One Jacobi rotation in the plane (p, q) zeroing a_pq; r and s are the two other indices."""
    # a_pq already 0 to float32 beside the diagonal gap: no rotation (and |θ| ≤ 5e17, θ² finite)
    zero = (tl.abs(apq) < 1e-30) | (tl.abs(apq) <= 1e-18 * tl.abs(aqq - app))
    theta = (aqq - app) / (2.0 * tl.where(zero, 1.0, apq))
    # t = tan of the rotation angle, the smaller root of t² + 2θt − 1 = 0 (|angle| ≤ π/4)
    t = tl.where(theta >= 0, 1.0, -1.0) / (tl.abs(theta) + tl.sqrt(theta * theta + 1.0))
    t = tl.where(zero, 0.0, t)
    c = 1.0 / tl.sqrt(t * t + 1.0)
    s = t * c
    app2 = app - t * apq
    aqq2 = aqq + t * apq
    arp2 = c * arp - s * arq
    arq2 = s * arp + c * arq
    asp2 = c * asp - s * asq
    asq2 = s * asp + c * asq
    return (app2, aqq2, apq * 0.0, arp2, arq2, asp2, asq2,
            c * v0p - s * v0q, s * v0p + c * v0q, c * v1p - s * v1q, s * v1p + c * v1q,
            c * v2p - s * v2q, s * v2p + c * v2q, c * v3p - s * v3q, s * v3p + c * v3q)


@triton.jit
def _top_eig4_kernel(g_ptr, lam_ptr, vec_ptr, n, SWEEPS: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    live = offs < n
    base = g_ptr + offs.to(tl.int64) * 16
    # the ten distinct entries a_ij (i ≤ j)
    a00 = tl.load(base + 0, mask=live, other=0.0).to(tl.float32)
    a01 = tl.load(base + 1, mask=live, other=0.0).to(tl.float32)
    a02 = tl.load(base + 2, mask=live, other=0.0).to(tl.float32)
    a03 = tl.load(base + 3, mask=live, other=0.0).to(tl.float32)
    a11 = tl.load(base + 5, mask=live, other=0.0).to(tl.float32)
    a12 = tl.load(base + 6, mask=live, other=0.0).to(tl.float32)
    a13 = tl.load(base + 7, mask=live, other=0.0).to(tl.float32)
    a22 = tl.load(base + 10, mask=live, other=0.0).to(tl.float32)
    a23 = tl.load(base + 11, mask=live, other=0.0).to(tl.float32)
    a33 = tl.load(base + 15, mask=live, other=0.0).to(tl.float32)
    one = tl.full([BLOCK], 1.0, tl.float32)
    nil = tl.zeros([BLOCK], tl.float32)
    # V = I; v_ij is row i, column j (column j: the eigenvector of the diagonal entry j)
    v00, v01, v02, v03 = one, nil, nil, nil
    v10, v11, v12, v13 = nil, one, nil, nil
    v20, v21, v22, v23 = nil, nil, one, nil
    v30, v31, v32, v33 = nil, nil, nil, one
    for _ in tl.static_range(SWEEPS):
        # (p, q) = (0, 1); r, s = 2, 3
        (a00, a11, a01, a02, a12, a03, a13, v00, v01, v10, v11, v20, v21, v30, v31) = _rotate(
            a00, a11, a01, a02, a12, a03, a13, v00, v01, v10, v11, v20, v21, v30, v31)
        # (0, 2); r, s = 1, 3
        (a00, a22, a02, a01, a12, a03, a23, v00, v02, v10, v12, v20, v22, v30, v32) = _rotate(
            a00, a22, a02, a01, a12, a03, a23, v00, v02, v10, v12, v20, v22, v30, v32)
        # (0, 3); r, s = 1, 2
        (a00, a33, a03, a01, a13, a02, a23, v00, v03, v10, v13, v20, v23, v30, v33) = _rotate(
            a00, a33, a03, a01, a13, a02, a23, v00, v03, v10, v13, v20, v23, v30, v33)
        # (1, 2); r, s = 0, 3
        (a11, a22, a12, a01, a02, a13, a23, v01, v02, v11, v12, v21, v22, v31, v32) = _rotate(
            a11, a22, a12, a01, a02, a13, a23, v01, v02, v11, v12, v21, v22, v31, v32)
        # (1, 3); r, s = 0, 2
        (a11, a33, a13, a01, a03, a12, a23, v01, v03, v11, v13, v21, v23, v31, v33) = _rotate(
            a11, a33, a13, a01, a03, a12, a23, v01, v03, v11, v13, v21, v23, v31, v33)
        # (2, 3); r, s = 0, 1
        (a22, a33, a23, a02, a03, a12, a13, v02, v03, v12, v13, v22, v23, v32, v33) = _rotate(
            a22, a33, a23, a02, a03, a12, a13, v02, v03, v12, v13, v22, v23, v32, v33)
    # the largest diagonal entry and its column of V (the first among equals)
    lam, u0, u1, u2, u3 = a00, v00, v10, v20, v30
    take = a11 > lam
    lam, u0, u1, u2, u3 = (tl.where(take, a11, lam), tl.where(take, v01, u0), tl.where(take, v11, u1),
                           tl.where(take, v21, u2), tl.where(take, v31, u3))
    take = a22 > lam
    lam, u0, u1, u2, u3 = (tl.where(take, a22, lam), tl.where(take, v02, u0), tl.where(take, v12, u1),
                           tl.where(take, v22, u2), tl.where(take, v32, u3))
    take = a33 > lam
    lam, u0, u1, u2, u3 = (tl.where(take, a33, lam), tl.where(take, v03, u0), tl.where(take, v13, u1),
                           tl.where(take, v23, u2), tl.where(take, v33, u3))
    tl.store(lam_ptr + offs, lam, mask=live)
    vbase = vec_ptr + offs.to(tl.int64) * 4
    tl.store(vbase, u0, mask=live)
    tl.store(vbase + 1, u1, mask=live)
    tl.store(vbase + 2, u2, mask=live)
    tl.store(vbase + 3, u3, mask=live)


def top_eigenpair(gram: Tensor) -> tuple[Tensor, Tensor]:
    """λ_max ``[...]`` and its unit eigenvector ``[..., W]`` of symmetric ``gram`` ``[..., W, W]``
    (W ≤ 4; only the upper triangle is read), both float32, no autograd."""
    W = gram.shape[-1]
    if gram.shape[-2] != W or not 1 <= W <= 4:
        raise ValueError(f"top_eigenpair takes square matrices of at most 4 x 4, got {tuple(gram.shape)}")
    flat = gram.detach().reshape(-1, W, W)
    if W < 4:  # decoupled rows and columns whose eigenvalues lie below any of the matrix (≥ −‖G‖_F)
        below = -(torch.linalg.matrix_norm(flat.float()) + 1.0)
        pad = torch.diag_embed(below[:, None].expand(-1, 4 - W))
        flat = torch.cat(
            [torch.cat([flat.float(), flat.new_zeros(flat.shape[0], W, 4 - W, dtype=torch.float32)], -1),
             torch.cat([flat.new_zeros(flat.shape[0], 4 - W, W, dtype=torch.float32), pad], -1)], -2)
    flat = flat.contiguous()
    n = flat.shape[0]
    lam = torch.empty(n, dtype=torch.float32, device=gram.device)
    vec = torch.empty(n, 4, dtype=torch.float32, device=gram.device)
    if n:
        _top_eig4_kernel[(triton.cdiv(n, BLOCK),)](flat, lam, vec, n, SWEEPS=SWEEPS, BLOCK=BLOCK)
    return lam.reshape(gram.shape[:-2]), vec[:, :W].reshape(*gram.shape[:-2], W)


class _TopEigenvalue(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gram: Tensor) -> Tensor:
        lam, vec = top_eigenpair(gram)
        ctx.save_for_backward(vec)
        ctx.dtype = gram.dtype
        return lam.to(gram.dtype)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        (vec,) = ctx.saved_tensors
        # ∂λ_max/∂G = u uᵀ, as torch.linalg.eigvalsh's backward gives for the top eigenvalue
        return (grad.float()[..., None, None] * vec[..., :, None] * vec[..., None, :]).to(ctx.dtype)


def top_eigenvalue_small(gram: Tensor) -> Tensor:
    """λ_max of each symmetric ``[..., W, W]`` (W ≤ 4) with its gradient, by the Triton Jacobi kernel."""
    return _TopEigenvalue.apply(gram)
