"""Falcon-3 over one block of tokens: the pseudo-value solve, the reads and the exit state.

Token i of a block (i = 1..L) writes a rank-≤W update

    S_i = γ_i S_{i−1} + Σ_j x_{i,j} u_{i,j}ᵀ,    u_{i,j} = a_i (v_{i,j} − S_{i−1}ᵀ x_{i,j}),    a_i = η_i / B_i,

where j runs over the W window slots of token i (invalid slots hold x = 0, so they write nothing). The
pseudo-values u are the unknowns (paper appendix H: the rank-B drivers). With g the block-local prefix
sum of log γ (g_0 = 0 at the block's entry state S_in), unrolling S_{i−1} gives

    S_{i−1}ᵀ x = e^{g_{i−1}} S_inᵀ x + Σ_{s<i} e^{g_{i−1} − g_s} Σ_j (x · x_{s,j}) u_{s,j},

so the stacked u solve a unit block-lower-triangular system of size L·W whose off-diagonal blocks couple
strictly earlier tokens only (the paper's block-strict-causal tensorInv): same-time slots do not interact,
every residual is taken at the pre-update state. Decay factors are exponentials of log-prefix differences
masked to s ≤ t before exponentiating, so no exponent is ever positive.

Shapes: leading batch dims ``...`` (e.g. batch, heads, chunks); xw ``[..., L, W, Dk]``, vw ``[..., L, W, Dv]``,
a / g ``[..., L]``, q ``[..., L, Dk]``, S_in ``[..., Dk, Dv]``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from falcon_lab.kernels.common.prepare import Prepared, windows


class WindowInputs(NamedTuple):
    """Head-major per-token inputs of falcon-3: xw ``[B, H, T, W, Dk]`` and vw ``[B, H, T, W, Dv]`` the window
    pairs (invalid slots hold x = 0), a ``[B, H, T]`` the per-slot step ``η_t / B_t``, log_gamma ``[B, H, T]``."""

    xw: Tensor
    vw: Tensor
    a: Tensor
    log_gamma: Tensor


def window_inputs(prep: Prepared, window: int) -> WindowInputs:
    """Gather each token's window of pairs from the extended arrays (tail of the state in front)."""
    xw = windows(prep.x_ext, window).permute(0, 3, 1, 2, 4)  # [B, T, W, H, D] -> [B, H, T, W, D]
    vw = windows(prep.y_ext, window).permute(0, 3, 1, 2, 4)
    a = prep.eta / prep.n_pairs.clamp(min=1.0)[..., None]  # η_t / B_t; η_t = 0 already where B_t = 0
    return WindowInputs(xw=xw, vw=vw, a=a.transpose(1, 2), log_gamma=torch.log(prep.gamma).transpose(1, 2))


def previous(g: Tensor) -> Tensor:
    """``g_{i−1}`` for each i, with ``g_0 = 0`` at the block entry."""
    return torch.cat([torch.zeros_like(g[..., :1]), g[..., :-1]], dim=-1)


def decay(g_row: Tensor, g_col: Tensor, inclusive: bool) -> Tensor:
    """``[..., L, L]`` factors ``exp(g_row[i] − g_col[s])`` for s ≤ i (s < i unless ``inclusive``), else 0.

    The difference is masked before the exponential: only non-positive exponents are ever taken.
    """
    L = g_row.shape[-1]
    keep = torch.ones(L, L, dtype=torch.bool, device=g_row.device).tril(0 if inclusive else -1)
    diff = g_row[..., :, None] - g_col[..., None, :]
    return torch.exp(diff.masked_fill(~keep, float("-inf")))


def _per_slot(coef: Tensor, W: int) -> Tensor:
    """``[..., L, L]`` token-pair factors -> ``[..., L·W, L·W]``, constant over the window slots."""
    *lead, L, _ = coef.shape
    return coef[..., :, None, :, None].expand(*lead, L, W, L, W).reshape(*lead, L * W, L * W)


def _per_column(coef: Tensor, W: int) -> Tensor:
    """``[..., L', L]`` factors -> ``[..., L', L·W]``, constant over the window slots of the columns."""
    *lead, Lr, L = coef.shape
    return coef[..., None].expand(*lead, Lr, L, W).reshape(*lead, Lr, L * W)


def solve_pseudo_values(xw: Tensor, a: Tensor, g: Tensor, rhs: Tensor) -> Tensor:
    """Solve ``(I + N) Z = rhs`` for the block-strict-causal system of the block.

    ``N[(i,·),(s,·)] = a_i e^{g_{i−1} − g_s} X_i X_sᵀ`` for s < i (zero otherwise). rhs ``[..., L, W, D]``
    is already scaled by a_i per token; returns Z ``[..., L·W, D]``, slots flattened token-major.
    """
    W = xw.shape[-2]
    xf = xw.flatten(-3, -2)  # [..., L·W, Dk]
    coef = a[..., :, None] * decay(previous(g), g, inclusive=False)
    system = _per_slot(coef, W) * (xf @ xf.transpose(-1, -2))  # N: its diagonal blocks are 0 (coef[i, i] = 0)
    # unitriangular: the solver reads only N's strictly lower part and takes the unit diagonal as given, so
    # I + N is never formed
    return unit_lower_triangular_solve(system, rhs.flatten(-3, -2))


def takes_triton_solve(system: Tensor, rhs: Tensor) -> bool:
    """Whether ``unit_lower_triangular_solve`` takes the Triton inverse: float32 systems of at most 64 on a GPU."""
    return system.is_cuda and system.dtype == rhs.dtype == torch.float32 and system.shape[-1] <= 64


def unit_lower_triangular_solve(system: Tensor, rhs: Tensor) -> Tensor:
    """``(I + strict_lower(system))⁻¹ rhs``: on a GPU in float32 for systems of up to 64 by the Triton inverse
    (falcon_lab/kernels/window/triton_tril_inverse.py), else by ``solve_triangular``."""
    if takes_triton_solve(system, rhs):
        from falcon_lab.kernels.window.triton_tril_inverse import unit_lower_solve

        return unit_lower_solve(system, rhs)
    return torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)


def entry_drive(xw: Tensor, vw: Tensor, a: Tensor, g: Tensor, S_in: Tensor) -> Tensor:
    """The right-hand side ``a_i (v_{i,j} − e^{g_{i−1}} S_inᵀ x_{i,j})``, ``[..., L, W, Dv]``."""
    read = torch.exp(previous(g))[..., None, None] * (xw @ S_in[..., None, :, :])
    return a[..., None, None] * (vw - read)


def block_read(q: Tensor, xw: Tensor, u: Tensor, g: Tensor, S_in: Tensor, raw: bool) -> Tensor:
    """Outputs ``[..., L, Dv]``: ``S_iᵀ q_i`` (read-after-write) or ``S_{i−1}ᵀ q_i`` (read-before-write).

    u: pseudo-values ``[..., L·W, Dv]``.
    """
    W = xw.shape[-2]
    g_read = g if raw else previous(g)
    scores = (q @ xw.flatten(-3, -2).transpose(-1, -2)) * _per_column(decay(g_read, g, inclusive=raw), W)
    return torch.exp(g_read)[..., None] * (q @ S_in) + scores @ u


def exit_weights(xw: Tensor, g: Tensor) -> Tensor:
    """``[..., L·W, Dk]`` features decayed to the block's exit, ``e^{g_L − g_s} x_{s,j}`` (exponents ≤ 0)."""
    to_exit = torch.exp(g[..., -1:] - g)  # g is non-increasing: every exponent is <= 0
    return (xw * to_exit[..., None, None]).flatten(-3, -2)


def block_exit(xw: Tensor, u: Tensor, g: Tensor, S_in: Tensor) -> Tensor:
    """The state after the block's last token, ``e^{g_L} S_in + Σ_s e^{g_L − g_s} Σ_j x_{s,j} u_{s,j}ᵀ``."""
    return torch.exp(g[..., -1])[..., None, None] * S_in + exit_weights(xw, g).transpose(-1, -2) @ u
