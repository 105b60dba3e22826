"""The recurrent oracle: a plain loop over tokens that reads like the table of SPEC §1.

Every other backend is tested against this file. It is exact in float64 and differentiable by autograd.
Shapes: q, k ``[B, T, H, Dk]``; v ``[B, T, H, Dv]``; beta ``[B, T, H]`` (``[B, T, H, Dv]`` for 2/2a);
lam ``[B, T, H]``. The window of pairs is held as W slots, oldest first, with a validity mask: a slot is
not a pair before the first token or at the fresh shifted boundary (``x_1 = 0``), so ``B_t`` counts the
valid slots only.
"""

from __future__ import annotations

import torch
from torch import Tensor

from kernels.common.config import RuleConfig
from kernels.common.state import FastWeightState


def window_energy(cfg: RuleConfig, xw: Tensor, valid: Tensor) -> Tensor:
    """The smoothness statistic E_t of the rule's step size, ``[B, H]``.

    ``‖x_t‖²`` for 1/2/1a/2a; ``μ_t = λ_max(X_tᵀX_t)/B_t`` for 3; ``Ē_t = mean_j ‖x_j‖²`` for 3a.
    xw: ``[B, H, W, Dk]`` window write features (zero in invalid slots); valid: ``[B, 1, W]``.
    """
    n = valid.sum(-1).clamp(min=1.0)
    if cfg.rule == "falcon-3":
        gram = xw @ xw.transpose(-1, -2)  # the small W×W Gram shares its top eigenvalue with XᵀX
        return torch.linalg.eigvalsh(gram)[..., -1] / n  # a few matrices per token: no batching limit
    if cfg.rule == "falcon-3a":
        return ((xw * xw).sum(-1) * valid).sum(-1) / n
    x = xw[:, :, -1]
    return (x * x).sum(-1)


def step_size_and_carry(cfg: RuleConfig, beta: Tensor, lam: Tensor, energy: Tensor,
                        n_pairs: Tensor) -> tuple[Tensor, Tensor]:
    """η and γ for one token. beta ``[B, H]`` (``[B, H, Dv]`` for 2/2a), lam/energy ``[B, H]``,
    n_pairs ``[B, 1]`` (B_t). Returns η and γ shaped like beta.

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


def _outer(a: Tensor, b: Tensor) -> Tensor:
    """a bᵀ for every batch and head."""
    return a[..., :, None] * b[..., None, :]


def _read(S: Tensor, x: Tensor) -> Tensor:
    """Sᵀx for every batch and head."""
    return torch.einsum("bhkv,bhk->bhv", S, x)


def update(cfg: RuleConfig, S: Tensor, xw: Tensor, vw: Tensor, valid: Tensor, eta: Tensor,
           gamma: Tensor) -> Tensor:
    """One write. S ``[B, H, Dk, Dv]``; xw/vw the window ``[B, H, W, D]``; valid ``[B, 1, W]``."""
    x, y = xw[:, :, -1], vw[:, :, -1]  # the newest pair (x_t, y_t)
    if cfg.rule == "falcon-1":
        r = y - _read(S, x)
        return gamma[..., None, None] * S + eta[..., None, None] * _outer(x, r)
    if cfg.rule == "falcon-2":
        r = y - _read(S, x)
        return gamma[..., None, :] * S + _outer(x, eta * r)
    if cfg.rule == "falcon-1a":
        return gamma[..., None, None] * S + eta[..., None, None] * _outer(x, y)
    if cfg.rule == "falcon-2a":
        return gamma[..., None, :] * S + _outer(x, eta * y)
    n = valid.sum(-1).clamp(min=1.0)[..., None, None]  # B_t
    w = valid[..., None]  # invalid slots contribute nothing
    if cfg.rule == "falcon-3":
        residuals = vw - torch.einsum("bhkv,bhwk->bhwv", S, xw)  # v_j − S_{t−1}ᵀ x_j
        drive = torch.einsum("bhwk,bhwv->bhkv", xw * w, residuals)
    else:  # falcon-3a
        drive = torch.einsum("bhwk,bhwv->bhkv", xw * w, vw)
    return gamma[..., None, None] * S + (eta[..., None, None] / n) * drive


def advance(cfg: RuleConfig, S: Tensor, xw: Tensor, vw: Tensor, mw: Tensor, q: Tensor, beta: Tensor,
            lam: Tensor) -> tuple[Tensor, Tensor]:
    """Write the newest pair of the window into S and read with q. Returns (o_t, S_t)."""
    valid = mw.to(S.dtype)[:, None, :]
    n_pairs = valid.sum(-1)
    eta, gamma = step_size_and_carry(cfg, beta, lam, window_energy(cfg, xw, valid), n_pairs)
    S_new = update(cfg, S, xw, vw, valid, eta, gamma)
    o = _read(S if cfg.timing == "rbw" else S_new, q)  # RBW reads S_{t−1}, RAW reads S_t
    return o, S_new


def recurrent_forward(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, cfg: RuleConfig,
                      state: FastWeightState, fresh: bool) -> tuple[Tensor, FastWeightState]:
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
        o_t, S = advance(cfg, S, xw, vw, mw, q[:, t], beta[:, t], lam[:, t])
        outputs.append(o_t)
        prev_key = k[:, t]
    final = FastWeightState(S=S, last_key=prev_key, x_tail=xw[:, :, 1:], v_tail=vw[:, :, 1:],
                            tail_mask=mw[:, 1:])
    return torch.stack(outputs, dim=1), final
