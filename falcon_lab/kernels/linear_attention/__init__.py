"""Decayed linear attention, the op behind the RetNet and Mamba-2 (SSD) baselines.

    S_t = exp(g_t) S_{t−1} + x_t v_tᵀ,    o_t = scale · S_tᵀ q_t (RAW)  or  scale · S_{t−1}ᵀ q_t (RBW)

RetNet uses a fixed per-head decay (g_t = log γ_h); Mamba-2's SSD uses g_t = Δ_t A_h, x_t = Δ_t B_t and
q_t = C_t. The state is a ``FastWeightState`` with an empty window tail, so continuation works as for the
Falcon rules.
"""

from falcon_lab.kernels.linear_attention.api import BACKENDS, linear_attention
from falcon_lab.kernels.linear_attention.chunk import chunk_decayed_attention

__all__ = ["BACKENDS", "chunk_decayed_attention", "linear_attention"]
