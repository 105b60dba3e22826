"""The recurrent oracle of the regression rules (SPEC §1), every other form of them is tested against it:

    falcon-1:  r = y − S_{t−1}ᵀ x,   S_t = γ S_{t−1} + η x rᵀ
    falcon-2:  S_t[:, j] = γ_j S_{t−1}[:, j] + η_j x r_j   (one gain and one carry per value column j)

with η = β / (‖x‖² + λ + ε) and γ = 1 − min(η λ, 1 − ε_γ) (``falcon_lab/kernels/common/recurrent.py``).
"""

from __future__ import annotations

from torch import Tensor

from falcon_lab.kernels.common.config import RuleConfig
from falcon_lab.kernels.common.recurrent import outer, read, recurrent_forward
from falcon_lab.kernels.common.state import FastWeightState


def write(cfg: RuleConfig, S: Tensor, xw: Tensor, vw: Tensor, valid: Tensor, eta: Tensor, gamma: Tensor) -> Tensor:
    """One write of the newest pair (x_t, y_t). S ``[B, H, Dk, Dv]``; xw/vw the window ``[B, H, 1, D]``."""
    x, y = xw[:, :, -1], vw[:, :, -1]
    r = y - read(S, x)
    if cfg.per_channel:  # falcon-2
        return gamma[..., None, :] * S + outer(x, eta * r)
    return gamma[..., None, None] * S + eta[..., None, None] * outer(x, r)


def recurrent_regression(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, cfg: RuleConfig,
                         state: FastWeightState, fresh: bool) -> tuple[Tensor, FastWeightState]:
    """falcon-1/2 token by token (see ``recurrent_forward``)."""
    return recurrent_forward(q, k, v, beta, lam, cfg, state, fresh, write)
