"""The recurrent oracle of the inner-product rules (SPEC §1), every other form of them is tested against it:

    falcon-1a:  S_t = γ S_{t−1} + η x yᵀ
    falcon-2a:  S_t[:, j] = γ_j S_{t−1}[:, j] + η_j x y_j   (one gain and one carry per value column j)

with η = β / (‖x‖² + λ + ε) and γ = 1 − min(η λ, 1 − ε_γ) (``falcon_lab/kernels/common/recurrent.py``).
"""

from __future__ import annotations

from torch import Tensor

from falcon_lab.kernels.common.config import RuleConfig
from falcon_lab.kernels.common.recurrent import outer, recurrent_forward
from falcon_lab.kernels.common.state import FastWeightState


def write(cfg: RuleConfig, S: Tensor, xw: Tensor, vw: Tensor, valid: Tensor, eta: Tensor, gamma: Tensor) -> Tensor:
    """One write of the newest pair (x_t, y_t). S ``[B, H, Dk, Dv]``; xw/vw the window ``[B, H, 1, D]``."""
    x, y = xw[:, :, -1], vw[:, :, -1]
    if cfg.per_channel:  # falcon-2a
        return gamma[..., None, :] * S + outer(x, eta * y)
    return gamma[..., None, None] * S + eta[..., None, None] * outer(x, y)


def recurrent_inner_product(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, cfg: RuleConfig,
                            state: FastWeightState, fresh: bool) -> tuple[Tensor, FastWeightState]:
    """falcon-1a/2a token by token (see ``recurrent_forward``)."""
    return recurrent_forward(q, k, v, beta, lam, cfg, state, fresh, write)
