"""The recurrent oracle of the gated delta rule: a plain loop that reads like the equation.

    S_t = exp(g_t) (I − β_t x_t x_tᵀ) S_{t−1} + β_t x_t v_tᵀ,    o_t = scale · S_tᵀ q_t   (RAW)
                                                                  o_t = scale · S_{t−1}ᵀ q_t (RBW)

DeltaNet is g = 0. Shapes: q, x ``[B, T, H, Dk]`` (x is the write feature, already aligned); v
``[B, T, H, Dv]``; g, beta ``[B, T, H]``; S0 ``[B, H, Dk, Dv]``. Exact in float64, differentiable by autograd.
"""

from __future__ import annotations

import torch
from torch import Tensor


def recurrent_gated_delta_rule(q: Tensor, x: Tensor, v: Tensor, g: Tensor, beta: Tensor, scale: float,
                               timing: str, S0: Tensor) -> tuple[Tensor, Tensor]:
    """Run the rule token by token from S0. Returns (o ``[B, T, H, Dv]``, S_T ``[B, H, Dk, Dv]``)."""
    S = S0
    outputs = []
    for t in range(q.shape[1]):
        x_t, v_t, q_t = x[:, t], v[:, t], q[:, t]
        gamma_t = torch.exp(g[:, t])[..., None, None]
        beta_t = beta[:, t][..., None, None]
        xS = torch.einsum("bhk,bhkv->bhv", x_t, S)  # x_tᵀ S_{t−1}
        erase = beta_t * x_t[..., :, None] * xS[..., None, :]  # β_t x_t x_tᵀ S_{t−1}
        write = beta_t * x_t[..., :, None] * v_t[..., None, :]  # β_t x_t v_tᵀ
        S_new = gamma_t * (S - erase) + write
        read_state = S if timing == "rbw" else S_new  # RBW reads S_{t−1}, RAW reads S_t
        outputs.append(scale * torch.einsum("bhkv,bhk->bhv", read_state, q_t))
        S = S_new
    return torch.stack(outputs, dim=1), S
