"""The chunk-parallel gated delta rule: the shared WY core with a = g, η = e^g β, w = β v."""

from __future__ import annotations

import torch
from torch import Tensor

from falcon_lab.kernels.delta.wy import wy_forward


def chunk_gated_delta_rule(q: Tensor, x: Tensor, v: Tensor, g: Tensor, beta: Tensor, scale: float,
                           timing: str, S0: Tensor, chunk_size: int = 64) -> tuple[Tensor, Tensor]:
    """Same arguments and result as ``recurrent_gated_delta_rule``; chunk size C, any T."""
    eta = torch.exp(g) * beta  # exp(g)(I − β x xᵀ) S = e^g S − (e^g β) x xᵀ S
    w = beta[..., None] * v
    return wy_forward(scale * q, x, w, g[..., None], eta[..., None], S0, timing, chunk_size)
