"""The one WY / UT-transform core shared by the gated delta rule and falcon-1/falcon-2.

It runs the regression recurrence written per token by a log-decay a_t ≤ 0, a step η_t and a write w_t:

    S_t = exp(a_t) ⊙ S_{t−1} − x_t (η_t ⊙ S_{t−1}ᵀ x_t)ᵀ + x_t w_tᵀ

where ⊙ acts per value column. a_t and η_t carry a trailing channel axis of size P: P = 1 shares
them across the Dv columns (falcon-1, the gated delta rule), P = Dv gives every column its own
(falcon-2; the columns are then independent recurrences sharing x). The gated delta rule is
a = g, η = e^g β, w = β v; falcon-1/2 is a = log γ, η = η, w = η ⊙ y.

Chunk form (paper §4.2, appendices E-G): inside a chunk entered with state S, the written vector
u_t = w_t − η_t ⊙ S_{t−1}ᵀ x_t makes the rule a decayed linear attention,
S_t = e^{a_t} ⊙ S_{t−1} + x_t u_tᵀ.
Unrolling S_{t−1} inside the chunk gives the unit-lower-triangular system

    u_t + η_t ⊙ Σ_{s<t} D(t−1, s) (x_tᵀ x_s) u_s = w_t − η_t ⊙ D(t−1, 0) ⊙ (Sᵀ x_t),

with D(i, j) = exp(Σ_{r=j+1}^{i} a_r) for j ≤ i (per channel when P = Dv). One triangular solve per chunk
(batched over the P channels, sharing the Gram X Xᵀ) gives U; outputs and the exit state follow by matmuls.
D is formed from chunk-local segment sums masked to j ≤ i before exp, so no positive number is ever
exponentiated and no carry is ever divided by. A single chunk of length T is the masked form.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def segment_decay(a: Tensor) -> Tensor:
    """``[..., C, P]`` log-decays -> ``[..., P, C+1, C+1]`` with D[i, j] = exp(Σ_{r=j+1}^{i} a_r) for j ≤ i,
    0 above the diagonal. Index 0 is the chunk entry (before the first token)."""
    a0 = F.pad(a, (0, 0, 1, 0)).transpose(-1, -2)  # [..., P, C+1], a0[0] = 0
    n = a0.shape[-1]
    strict = torch.ones(n, n, dtype=torch.bool, device=a.device).tril(-1)  # i > j
    # summing a_r over j < r ≤ i as a cumulative sum down each column: exact, no difference of prefixes
    zero = torch.zeros((), dtype=a.dtype, device=a.device)
    seg = torch.where(strict, a0[..., :, None].expand(*a0.shape, n), zero).cumsum(-2)
    lower = torch.ones(n, n, dtype=torch.bool, device=a.device).tril()
    return torch.where(lower, torch.exp(seg), zero)  # seg is 0 above the diagonal: exp never sees > 0


def _to_channels(t: Tensor, P: int) -> Tensor:
    """``[..., C, Dv]`` -> ``[..., P, C, Dv/P]``: the right-hand sides of the P channel systems."""
    return t.unsqueeze(-3) if P == 1 else t.transpose(-1, -2).unsqueeze(-1)


def _from_channels(t: Tensor, P: int) -> Tensor:
    """The inverse of ``_to_channels``."""
    return t.squeeze(-3) if P == 1 else t.squeeze(-1).transpose(-1, -2)


def wy_forward(q: Tensor, x: Tensor, w: Tensor, a: Tensor, eta: Tensor, S0: Tensor, timing: str,
               chunk_size: int) -> tuple[Tensor, Tensor]:
    """Run the recurrence chunk by chunk.

    q, x: ``[B, T, H, Dk]``; w: ``[B, T, H, Dv]``; a, eta: ``[B, T, H, P]`` with P ∈ {1, Dv}; S0
    ``[B, H, Dk, Dv]``. Reads ``o_t = S_tᵀ q_t`` (``timing="raw"``) or ``S_{t−1}ᵀ q_t`` (``"rbw"``).
    Returns (o ``[B, T, H, Dv]``, S_T). Memory beyond the inputs is O(T·C·P) (C×C blocks only).
    """
    B, T, H, _ = x.shape
    P = a.shape[-1]
    C = min(chunk_size, T)
    N = -(-T // C)
    pad = N * C - T

    def chunks(t: Tensor) -> Tensor:
        # padded tokens have a = 0 (carry 1), η = 0 and x = w = q = 0: they leave S untouched
        t = F.pad(t, (0, 0, 0, 0, 0, pad)) if pad else t
        return t.reshape(B, N, C, H, t.shape[-1]).permute(0, 3, 1, 2, 4)  # [B, H, N, C, ·]

    q, x, w, a, eta = map(chunks, (q, x, w, a, eta))
    D = segment_decay(a)  # [B, H, N, P, C+1, C+1]
    entry_prev = D[..., :C, 0].transpose(-1, -2)  # D(t−1, 0): carry from the chunk entry to t−1, [.., C, P]
    entry_cur = D[..., 1:, 0].transpose(-1, -2)  # D(t, 0)
    to_exit = D[..., C, 1:].transpose(-1, -2)  # D(C, s), [.., C, P]
    chunk_carry = D[..., C, 0][..., None, :]  # D(C, 0), [.., 1, P]
    gram = x @ x.transpose(-1, -2)  # [B, H, N, C, C], shared by the P channels
    L = eta.transpose(-1, -2)[..., :, None] * D[..., :C, 1:] * gram[..., None, :, :]  # strictly lower
    scores = q @ x.transpose(-1, -2)
    if timing == "rbw":
        read_entry, read_mask = entry_prev, D[..., :C, 1:]
    else:
        read_entry, read_mask = entry_cur, D[..., 1:, 1:]
    read = read_mask * scores[..., None, :, :]  # [B, H, N, P, C, C]
    history = eta * entry_prev

    # Chunk n's slices come from unbind, not from indexing [:, :, n]: the backward of each indexing writes a
    # zero tensor the size of the whole input, N per input, so O(N²) memory traffic over a sequence.
    S = S0
    outputs = []
    per_chunk = (t.unbind(2) for t in (x, w, history, L, read_entry, q, read, chunk_carry, to_exit))
    for x_n, w_n, history_n, L_n, read_entry_n, q_n, read_n, carry_n, to_exit_n in zip(*per_chunk):
        rhs = w_n - history_n * (x_n @ S)
        U = torch.linalg.solve_triangular(L_n, _to_channels(rhs, P), upper=False, unitriangular=True)
        o_n = read_entry_n * (q_n @ S) + _from_channels(read_n @ U, P)
        outputs.append(o_n)
        S = carry_n * S + x_n.transpose(-1, -2) @ (to_exit_n * _from_channels(U, P))
    o = torch.stack(outputs, dim=2).reshape(B, H, N * C, -1)[:, :, :T].transpose(1, 2)
    return o, S
