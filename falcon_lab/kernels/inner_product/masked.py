"""The masked-parallel (O(T²)) form of the inner-product rules falcon-1a, falcon-2a and falcon-3a.

Unrolling S_t = γ_t S_{t−1} + (η_t / B_t) Σ_{j∈I_t} x_j y_jᵀ over the whole sequence (paper §4.5-4.6):

    o_t = Σ_j (q_t·x_j) M_{t,j} y_j + (Π_{r≤t} γ_r) S_0ᵀ q_t,
    M_{t,j} = Σ_{s=j}^{min(t, j+W−1)} (η_s / B_s) Π_{r=s+1}^{t} γ_r

over the pairs j of the extended sequence (the W − 1 pairs of the state's tail first). 1a and 2a have
W = 1, so M is the decay mask itself; for 2a, η and γ, hence M, are per value channel. RBW reads
S_{t−1}: the query side of the decay stops at t − 1 and the sum over s at t − 1.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from falcon_lab.kernels.common.config import RuleConfig
from falcon_lab.kernels.common.prepare import Prepared, final_state, prepare
from falcon_lab.kernels.common.state import FastWeightState
from falcon_lab.kernels.linear_attention.chunk import band_window


def write_weight(prep: Prepared) -> Tensor:
    """η_t / B_t, shaped like η (``[B, T, H]`` or ``[B, T, H, Dv]``); η is already 0 where B_t = 0."""
    n = prep.n_pairs.clamp(min=1.0)
    return prep.eta / (n[..., None] if prep.eta.dim() == 3 else n[..., None, None])


def masked_inner_product(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, cfg: RuleConfig,
                         state: FastWeightState, fresh: bool) -> tuple[Tensor, FastWeightState]:
    """Outputs and final state of falcon-1a/2a/3a from whole-sequence T × (T + W − 1) masks."""
    prep = prepare(k, v, beta, lam, cfg, state, fresh)
    W = cfg.span
    channels = lambda t: (t if t.dim() == 4 else t[..., None]).movedim(1, 2)  # noqa: E731  [B, H, T, G]
    log_gamma, w = channels(prep.gamma.log()), channels(write_weight(prep))
    G = log_gamma.cumsum(dim=2)  # log Π_{r≤t} γ_r
    G_read = F.pad(G[..., :-1, :], (0, 0, 1, 0)) if cfg.timing == "rbw" else G  # log Π_{r≤t−1} γ_r for RBW

    T = q.shape[1]
    idx = torch.arange(T, device=q.device)
    causal = (idx[None, :] < idx[:, None]) if cfg.timing == "rbw" else (idx[None, :] <= idx[:, None])
    diff = G_read[..., :, None, :] - G[..., None, :, :]  # [B, H, T_t, T_s, G]
    D = torch.where(causal[..., None], diff, float("-inf")).exp() * w[..., None, :, :]  # masked, then exp
    M = band_window(D, W)  # [B, H, T, T + W − 1, G]

    Q = q.movedim(1, 2)
    X, Y = prep.x_ext.movedim(1, 2), prep.y_ext.movedim(1, 2)  # [B, H, T + W − 1, D]
    scores = Q @ X.transpose(-1, -2)
    if M.shape[-1] == 1:
        o = (scores * M[..., 0]) @ Y
    else:
        o = torch.einsum("bhtj,bhtjc,bhjc->bhtc", scores, M, Y)
    o = o + G_read.exp() * (Q @ state.S)  # the decayed read of S_0

    to_end = band_window((G[..., -1:, :] - G).exp() * w, W)  # M_{T,j}: each pair's weight in S_T
    S = G[..., -1, :].exp()[..., None, :] * state.S + X.transpose(-1, -2) @ (to_end * Y)
    return o.movedim(1, 2), final_state(S, k, prep, cfg)
