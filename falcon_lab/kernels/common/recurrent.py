"""The loop every Falcon rule's recurrent oracle runs: a plain pass over tokens, one write per token.

A rule is its write (``falcon_lab/kernels/<family>/naive.py``) and the energy E_t of its step size; the loop, the window
of pairs and the step size and carry (SPEC §1) are the same for all six. Exact in float64, differentiable by
autograd. Shapes: q, k ``[B, T, H, Dk]``; v ``[B, T, H, Dv]``; beta ``[B, T, H]`` (``[B, T, H, Dv]`` for 2/2a);
lam ``[B, T, H]``. The window of pairs is held as W slots, oldest first, with a validity mask: a slot is not a
pair before the first token or at the fresh shifted boundary (``x_1 = 0``), so ``B_t`` counts the valid slots
only. Without normalisation (``cfg.normalize`` False, the ctxη reading) the tensor in beta's place is η itself.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from falcon_lab.kernels.common.config import RuleConfig
from falcon_lab.kernels.common.state import FastWeightState

# energy(cfg, xw, valid) -> E_t [B, H]; write(cfg, S, xw, vw, valid, eta, gamma) -> S_t
Energy = Callable[[RuleConfig, Tensor, Tensor], Tensor]
Write = Callable[[RuleConfig, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]


def pair_energy(cfg: RuleConfig, xw: Tensor, valid: Tensor) -> Tensor:
    """E_t = ‖x_t‖² of the newest pair, ``[B, H]`` (xw: ``[B, H, W, Dk]``, zero in invalid slots)."""
    x = xw[:, :, -1]
    return (x * x).sum(-1)


def step_size_and_carry(cfg: RuleConfig, beta: Tensor, lam: Tensor, energy: Tensor,
                        n_pairs: Tensor) -> tuple[Tensor, Tensor]:
    """η and γ. beta (η itself without normalisation) ``[..., H]`` (``[..., H, Dv]`` for 2/2a), lam/energy
    ``[..., H]``, n_pairs ``[..., 1]`` (B_t). Returns η and γ shaped like beta.

    η = β / (E + λ + ε), with η := 0 where the denominator is 0 or where there is no pair (B_t = 0);
    α = min(η λ, 1 − ε_γ); γ = 1 − α.
    """
    if cfg.scale_coupled_ridge:
        lam = lam * energy  # λ_t = λ̄_t E_t
    if cfg.per_channel:
        lam, energy, n_pairs = lam[..., None], energy[..., None], n_pairs[..., None]
    if cfg.normalize:
        denom = energy + lam + cfg.eps
        positive = denom > 0
        eta = torch.where(positive, beta / torch.where(positive, denom, torch.ones_like(denom)),
                          torch.zeros_like(beta))
    else:
        eta = beta
    eta = torch.where(n_pairs > 0, eta, torch.zeros_like(eta))
    alpha = torch.clamp(eta * lam, max=1.0 - cfg.decay_floor)
    gamma = 1.0 - alpha
    return eta, gamma


def outer(a: Tensor, b: Tensor) -> Tensor:
    """a bᵀ for every batch and head."""
    return a[..., :, None] * b[..., None, :]


def read(S: Tensor, x: Tensor) -> Tensor:
    """Sᵀx for every batch and head."""
    return torch.einsum("bhkv,bhk->bhv", S, x)


def recurrent_forward(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, cfg: RuleConfig,
                      state: FastWeightState, fresh: bool, write: Write,
                      energy: Energy = pair_energy) -> tuple[Tensor, FastWeightState]:
    """Run the rule token by token from ``state``. ``fresh`` marks a fresh sequence (``x_1 = 0``,
    ``λ_1 = 0``: the boundary pair is not a pair). All tensors are already in the compute dtype."""
    T = q.shape[1]
    S = state.S
    # a W-slot window: one slot in front of the W−1 tail, dropped by the first shift
    xw = torch.cat([torch.zeros_like(k[:, 0, :, None]), state.x_tail], dim=2)
    vw = torch.cat([torch.zeros_like(v[:, 0, :, None]), state.v_tail], dim=2)
    mw = torch.cat([state.tail_mask.new_zeros(q.shape[0], 1), state.tail_mask], dim=1)
    prev_key = state.last_key
    outputs = []
    for t in range(T):
        if cfg.shifted:
            x_t, is_pair = prev_key, not (fresh and t == 0)
        else:
            x_t, is_pair = k[:, t], True
        xw = torch.cat([xw[:, :, 1:], x_t[:, :, None]], dim=2)
        vw = torch.cat([vw[:, :, 1:], v[:, t, :, None]], dim=2)
        mw = torch.cat([mw[:, 1:], mw.new_full((q.shape[0], 1), is_pair)], dim=1)
        valid = mw.to(S.dtype)[:, None, :]  # [B, 1, W]
        eta, gamma = step_size_and_carry(cfg, beta[:, t], lam[:, t], energy(cfg, xw, valid), valid.sum(-1))
        S_new = write(cfg, S, xw, vw, valid, eta, gamma)
        outputs.append(read(S if cfg.timing == "rbw" else S_new, q[:, t]))  # RBW reads S_{t−1}, RAW S_t
        S = S_new
        prev_key = k[:, t]
    final = FastWeightState(S=S, last_key=prev_key, x_tail=xw[:, :, 1:], v_tail=vw[:, :, 1:],
                            tail_mask=mw[:, 1:])
    return torch.stack(outputs, dim=1), final
