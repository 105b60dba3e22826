"""Chunk-parallel decayed linear attention in pure PyTorch (paper Algorithm 4; autograd does the backward).

One core serves linear attention (RetNet, Mamba-2 SSD) and the inner-product Falcon rules 1a/2a/3a:

    S_t = exp(g_t) ⊙ S_{t−1} + w_t Σ_{d<W} x_{t−d} v_{t−d}ᵀ,    o_t = S_tᵀ q_t (RAW) or S_{t−1}ᵀ q_t (RBW)

where the window of W pairs reaches W − 1 pairs before the first token (the previous segment's tail) and the
decay g (and weight w) is per head or per value channel. Inside a chunk of C tokens the write of token s
reaches token t through D_{t,s} = exp(G_t − G_s) w_s with G the chunk-LOCAL prefix sum of g, masked to
s <= t before exponentiating; pair j reaches t through the banded mask M_{t,j} = Σ_{s ∈ window(j)} D_{t,s}.
Between chunks only S is passed. Memory is O(T·C), never O(T²).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from falcon_lab.kernels.common.state import FastWeightState


def band_window(D: Tensor, window: int) -> Tensor:
    """Sum W shifted copies of D along its token axis (dim −2): ``[..., S, G]`` -> ``[..., S + W − 1, G]``.

    Pair j (of S + W − 1, the first W − 1 before token 0) is read by tokens j − W + 1 .. j, so
    ``out[..., j, :] = Σ_{d<W} D[..., j − d, :]`` over the tokens that exist.
    """
    if window == 1:
        return D
    padded = F.pad(D, (0, 0, window - 1, window - 1))
    length = D.shape[-2] + window - 1
    return sum(padded[..., window - 1 - d: window - 1 - d + length, :] for d in range(window))


def _chunks(t: Tensor, n_chunks: int, size: int, step: int) -> Tensor:
    """``[B, L, H, ...]`` -> ``[B, H, N, size, ...]``: N windows of ``size`` tokens every ``step`` tokens,
    zero-padded at the end."""
    need = (n_chunks - 1) * step + size
    t = t.movedim(1, 2)  # [B, H, L, ...]
    pad = [0, 0] * (t.dim() - 3) + [0, need - t.shape[2]]
    return F.pad(t, pad).unfold(2, size, step).movedim(-1, 3)


def chunk_decayed_attention(q: Tensor, x: Tensor, v: Tensor, log_decay: Tensor, S0: Tensor, *,
                            chunk_size: int, rbw: bool, window: int = 1,
                            weight: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The chunk form of the recurrence in the module docstring.

    Args:
        q: ``[B, T, H, Dk]`` queries (any read scale already applied).
        x, v: ``[B, T + W − 1, H, Dk]`` / ``[B, T + W − 1, H, Dv]`` the pairs, W − 1 of them before token 0;
            a pair that is not a pair must hold x = 0.
        log_decay: g ``[B, T, H]`` (per head) or ``[B, T, H, Dv]`` (per value channel), <= 0.
        S0: ``[B, H, Dk, Dv]`` the state before token 0.
        weight: w ``[B, T, H]`` or ``[B, T, H, Dv]``, the write weight of each token (ones when None).

    Returns:
        o ``[B, T, H, Dv]`` and the final state ``[B, H, Dk, Dv]``.
    """
    B, T, H, _ = q.shape
    Dv = v.shape[-1]
    C, W = chunk_size, window
    N = -(-T // C)
    per_channel = log_decay.dim() == 4 or (weight is not None and weight.dim() == 4)
    G_dim = Dv if per_channel else 1
    as_channels = lambda t: (t if t.dim() == 4 else t[..., None]).expand(B, T, H, G_dim)  # noqa: E731
    g = as_channels(log_decay)
    w = as_channels(weight if weight is not None else torch.ones_like(log_decay))

    # padded tokens carry g = 0 and w = 0: they neither decay nor write, so S passes through them
    qc = _chunks(q, N, C, C)  # [B, H, N, C, Dk]
    gc, wc = _chunks(g, N, C, C), _chunks(w, N, C, C)  # [B, H, N, C, G]
    xc, vc = _chunks(x, N, C + W - 1, C), _chunks(v, N, C + W - 1, C)  # [B, H, N, C + W − 1, D]

    G = gc.cumsum(dim=3)  # chunk-local log prefix, inclusive
    G_read = F.pad(G[..., :-1, :], (0, 0, 1, 0)) if rbw else G  # RBW reads before token t's own write
    idx = torch.arange(C, device=q.device)
    causal = (idx[None, :] < idx[:, None]) if rbw else (idx[None, :] <= idx[:, None])  # [t, s]
    diff = G_read[..., :, None, :] - G[..., None, :, :]  # [B, H, N, C_t, C_s, G]
    D = torch.where(causal[..., None], diff, float("-inf")).exp() * wc[..., None, :, :]
    M = band_window(D, W)  # [B, H, N, C_t, C + W − 1, G]

    scores = qc @ xc.transpose(-1, -2)  # [B, H, N, C, C + W − 1]
    if per_channel:
        o_intra = torch.einsum("bhntj,bhntjc,bhnjc->bhntc", scores, M, vc)
    else:
        o_intra = (scores * M[..., 0]) @ vc

    G_end = G[..., -1:, :]  # [B, H, N, 1, G]
    to_end = band_window((G_end - G).exp() * wc, W)  # [B, H, N, C + W − 1, G]: each pair's weight in S_end
    writes = xc.transpose(-1, -2) @ (to_end * vc)  # [B, H, N, Dk, Dv]
    carry = G_end.exp()  # [B, H, N, 1, G]

    S = S0
    starts = []
    for carry_n, writes_n in zip(carry.unbind(2), writes.unbind(2)):  # unbind: no O(N²) zero gradients
        starts.append(S)
        S = carry_n * S + writes_n
    S_in = torch.stack(starts, dim=2)  # [B, H, N, Dk, Dv]
    o_hist = G_read.exp() * (qc @ S_in)

    o = (o_hist + o_intra).reshape(B, H, N * C, Dv)[:, :, :T]
    return o.transpose(1, 2), S


def chunk_linear_attention(q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, scale: float, shifted: bool,
                           rbw: bool, state: FastWeightState,
                           chunk_size: int = 64) -> tuple[Tensor, FastWeightState]:
    """The chunk backend of ``linear_attention``; same arguments as the recurrent oracle."""
    x = torch.cat([state.last_key[:, None], k[:, :-1]], dim=1) if shifted else k
    o, S = chunk_decayed_attention(q * scale, x, v, log_decay, state.S, chunk_size=chunk_size, rbw=rbw)
    final = FastWeightState(S=S, last_key=k[:, -1], x_tail=state.x_tail, v_tail=state.v_tail,
                            tail_mask=state.tail_mask)
    return o, final
