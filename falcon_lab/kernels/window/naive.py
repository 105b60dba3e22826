"""The recurrent oracle of the window rules (SPEC §1), every other form of them is tested against it. Each token
takes one step on the mean loss of its window I_t of B_t pairs (X_t stacks their x_j):

    falcon-3:   η = β / (μ + λ + ε),  μ = λ_max(X_tᵀX_t) / B_t,
                S_t = γ S_{t−1} + (η / B_t) Σ_{j∈I_t} x_j (v_j − S_{t−1}ᵀ x_j)ᵀ
    falcon-3a:  η = β / (Ē + λ + ε),  Ē = mean_{j∈I_t} ‖x_j‖²,
                S_t = γ S_{t−1} + (η / B_t) Σ_{j∈I_t} x_j v_jᵀ

with γ = 1 − min(η λ, 1 − ε_γ) (``falcon_lab/kernels/common/recurrent.py``); B_t = 0 is a no-op.
"""

from __future__ import annotations

import torch
from torch import Tensor

from falcon_lab.kernels.common.config import RuleConfig
from falcon_lab.kernels.common.recurrent import recurrent_forward
from falcon_lab.kernels.common.state import FastWeightState


def energy(cfg: RuleConfig, xw: Tensor, valid: Tensor) -> Tensor:
    """μ_t (falcon-3) or Ē_t (falcon-3a), ``[B, H]``. xw: ``[B, H, W, Dk]`` (zero in invalid slots); valid:
    ``[B, 1, W]``."""
    n = valid.sum(-1).clamp(min=1.0)
    if cfg.regression:  # falcon-3: the top eigenvalue of the window's XᵀX
        gram = xw @ xw.transpose(-1, -2)  # the small W×W Gram shares its top eigenvalue with XᵀX
        return torch.linalg.eigvalsh(gram)[..., -1] / n  # a few matrices per token: no batching limit
    return ((xw * xw).sum(-1) * valid).sum(-1) / n


def write(cfg: RuleConfig, S: Tensor, xw: Tensor, vw: Tensor, valid: Tensor, eta: Tensor, gamma: Tensor) -> Tensor:
    """One step on the window's pairs. S ``[B, H, Dk, Dv]``; xw/vw ``[B, H, W, D]``; valid ``[B, 1, W]``."""
    n = valid.sum(-1).clamp(min=1.0)[..., None, None]  # B_t
    w = valid[..., None]  # invalid slots contribute nothing
    if cfg.regression:  # falcon-3
        residuals = vw - torch.einsum("bhkv,bhwk->bhwv", S, xw)  # v_j − S_{t−1}ᵀ x_j
        drive = torch.einsum("bhwk,bhwv->bhkv", xw * w, residuals)
    else:  # falcon-3a
        drive = torch.einsum("bhwk,bhwv->bhkv", xw * w, vw)
    return gamma[..., None, None] * S + (eta[..., None, None] / n) * drive


def recurrent_window(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, cfg: RuleConfig,
                     state: FastWeightState, fresh: bool) -> tuple[Tensor, FastWeightState]:
    """falcon-3/3a token by token (see ``recurrent_forward``)."""
    return recurrent_forward(q, k, v, beta, lam, cfg, state, fresh, write, energy)
