"""The recurrent oracle of decayed linear attention: a plain loop over tokens.

    S_t = exp(g_t) S_{t−1} + x_t v_tᵀ,    o_t = scale · S_tᵀ q_t (RAW)  or  scale · S_{t−1}ᵀ q_t (RBW)

with x_t = k_t (same_time) or k_{t−1} (shifted; the first x is the state's last key, zero when fresh).
Every other form of the op is tested against this file. Tensors arrive in the compute dtype.
"""

from __future__ import annotations

import torch
from torch import Tensor

from falcon_lab.kernels.common.state import FastWeightState


def recurrent_linear_attention(q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, scale: float,
                               shifted: bool, rbw: bool,
                               state: FastWeightState) -> tuple[Tensor, FastWeightState]:
    """q, k ``[B, T, H, Dk]``; v ``[B, T, H, Dv]``; log_decay ``[B, T, H]``. Returns (o, final state)."""
    S = state.S
    prev_key = state.last_key  # zero on a fresh sequence, so x_1 = 0 writes nothing
    outputs = []
    for t in range(q.shape[1]):
        x_t = prev_key if shifted else k[:, t]
        S_new = log_decay[:, t, :, None, None].exp() * S + x_t[..., :, None] * v[:, t, :, None, :]
        read_state = S if rbw else S_new
        outputs.append(scale * torch.einsum("bhkv,bhk->bhv", read_state, q[:, t]))
        S = S_new
        prev_key = k[:, t]
    final = FastWeightState(S=S, last_key=prev_key, x_tail=state.x_tail, v_tail=state.v_tail,
                            tail_mask=state.tail_mask)
    return torch.stack(outputs, dim=1), final
