"""The per-token quantities of a rule, computed for the whole sequence at once.

The parallel backends (masked, chunk) start from these: the write pairs (x_t, y_t), which of them are
real pairs, the window of pairs each token reads (3/3a), and the step size η_t and carry γ_t. The
recurrent oracle computes the same quantities inside its loop; the tests hold the two to each other.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import torch
from torch import Tensor

from falcon_lab.kernels.common.config import RuleConfig
from falcon_lab.kernels.common.recurrent import step_size_and_carry
from falcon_lab.kernels.common.state import FastWeightState


class Prepared(NamedTuple):
    """x: ``[B, T, H, Dk]`` write features; y: ``[B, T, H, Dv]`` targets (= v); valid: ``[B, T]`` real pairs.
    x_ext / y_ext / valid_ext: the same with the state's W−1 tail in front (``T + W − 1`` along time), so
    token t's window is positions ``t .. t + W − 1`` of the extended arrays. eta, gamma: ``[B, T, H]``
    (``[B, T, H, Dv]`` for 2/2a). n_pairs: ``[B, T]`` (B_t). energy: ``[B, T, H]`` (E_t, μ_t or Ē_t)."""

    x: Tensor
    y: Tensor
    valid: Tensor
    x_ext: Tensor
    y_ext: Tensor
    valid_ext: Tensor
    eta: Tensor
    gamma: Tensor
    n_pairs: Tensor
    energy: Tensor


def write_pairs(k: Tensor, state: FastWeightState, cfg: RuleConfig, fresh: bool) -> tuple[Tensor, Tensor]:
    """x_t (``k_{t−1}`` shifted, ``k_t`` same-time) and the validity of each pair, ``[B, T]``."""
    B, T = k.shape[:2]
    valid = torch.ones(B, T, dtype=torch.bool, device=k.device)
    if not cfg.shifted:
        return k, valid
    x = torch.cat([state.last_key[:, None], k[:, :-1]], dim=1)
    if fresh:
        valid[:, 0] = False  # x_1 = 0 on a fresh sequence is not a pair
    return x, valid


def windows(t: Tensor, span: int) -> Tensor:
    """``[B, T + W − 1, ...]`` -> ``[B, T, W, ...]``: the W consecutive entries ending at each token."""
    return t.unfold(1, span, 1).movedim(-1, 2)


def window_gram(x_ext: Tensor, W: int) -> Tensor:
    """``[B, T + W − 1, H, D]`` -> ``[B, T, H, W, W]``: the Gram matrix of each token's window of W entries. Entry
    (i, j) of token t is x_{t+i} · x_{t+j}, the lag-|i − j| product at t + min(i, j): W products along the sequence
    (one per lag) give all W² entries, where a batched ``xw @ xwᵀ`` ran as T·H products of W × D by D × W matrices
    (a slow small-matrix GEMM, forward and backward)."""
    T = x_ext.shape[1] - W + 1
    lags = [(x_ext[:, : x_ext.shape[1] - d] * x_ext[:, d:]).sum(-1) for d in range(W)]  # [B, T + W − 1 − d, H]
    rows = [torch.stack([lags[abs(i - j)][:, min(i, j): min(i, j) + T] for j in range(W)], dim=-1)
            for i in range(W)]
    return torch.stack(rows, dim=-2)


def prepare(k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, cfg: RuleConfig, state: FastWeightState, fresh: bool,
            top_eigenvalue: Callable[[Tensor], Tensor] | None = None) -> Prepared:
    """Everything the parallel forms need besides q (inputs in the compute dtype; the fused window forms pass k and v
    in their own, and the concatenations with the float32 state make x_ext and y_ext float32). falcon-3's μ_t takes
    ``top_eigenvalue``, λ_max of a batch of small symmetric matrices (``falcon_lab/kernels/window/eigen.py``)."""
    x, valid = write_pairs(k, state, cfg, fresh)
    W = cfg.span
    valid_ext = torch.cat([state.tail_mask, valid], dim=1)  # [B, T+W−1]
    # x_ext [B, T+W−1, H, Dk], every slot that holds no pair exactly 0: the tail's masked here (W − 1 slots), and the
    # only invalid x_t, the boundary x_1 of a fresh sequence, is the fresh state's zero last key (write_pairs). The
    # concatenation promotes k's dtype to the state's (float32 in the kernels' forms) in one copy.
    tail = state.x_tail.transpose(1, 2)
    x_ext = torch.cat([tail * state.tail_mask[:, :, None, None].to(tail.dtype), x], dim=1)
    y_ext = torch.cat([state.v_tail.transpose(1, 2), v], dim=1)
    mask_w = windows(valid_ext, W).to(x_ext.dtype)  # [B, T, W]
    n_pairs = mask_w.sum(-1)  # B_t
    n = n_pairs.clamp(min=1.0)[..., None]
    if cfg.windowed and cfg.regression:  # falcon-3
        if top_eigenvalue is None:
            raise ValueError("falcon-3's step size needs top_eigenvalue (falcon_lab/kernels/window/eigen.py)")
        gram = window_gram(x_ext, W)  # the small W×W Gram shares its top eigenvalue with XᵀX
        energy = top_eigenvalue(gram) / n  # μ_t
    elif cfg.windowed:  # falcon-3a
        # ‖x‖² [B, T+W−1, H] through the norm: neither pass writes an array of x's size but the gradient itself
        sq = torch.linalg.vector_norm(x_ext, dim=-1).square()
        energy = windows(sq, W).sum(2) / n  # Ē_t (invalid slots hold x = 0)
    else:
        energy = (x * x).sum(-1) * valid[..., None].to(x.dtype)
    eta, gamma = step_size_and_carry(cfg, beta, lam, energy, n_pairs[..., None])
    return Prepared(x=x_ext[:, W - 1:], y=v, valid=valid, x_ext=x_ext, y_ext=y_ext, valid_ext=valid_ext,
                    eta=eta, gamma=gamma, n_pairs=n_pairs, energy=energy)


def final_state(S: Tensor, k: Tensor, prep: Prepared, cfg: RuleConfig) -> FastWeightState:
    """The state after the last token: S, the last key and the last W−1 pairs."""
    W = cfg.span
    T_ext = prep.x_ext.shape[1]
    start = T_ext - (W - 1)
    return FastWeightState(S=S, last_key=k[:, -1], x_tail=prep.x_ext[:, start:].transpose(1, 2),
                           v_tail=prep.y_ext[:, start:].transpose(1, 2), tail_mask=prep.valid_ext[:, start:])
