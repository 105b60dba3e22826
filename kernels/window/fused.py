"""``backend="triton"`` for falcon-3a: the window rule as W decayed linear attentions on the falcon-1a kernels.

falcon-3a writes the mean outer product of its window of W pairs, with one step and one carry per token:

    S_t = γ_t S_{t−1} + a_t Σ_{j<W} x_{t−j} y_{t−j}ᵀ,    a_t = η_t / B_t,

(x, y the pairs, zero where a slot holds no pair; B_t the pairs in the window). The write is linear in the
pairs and every lag j shares a_t and γ_t, so S_t = Σ_j S^(j)_t with

    S^(j)_t = γ_t S^(j)_{t−1} + a_t x_{t−j} y_{t−j}ᵀ,

each a falcon-1a recurrence in the ctxη reading (``normalize=False``: the gain passed is the step itself)
over keys and values delayed by j, same-time aligned. Its carry 1 − min(β λ, 1 − ε_γ) is falcon-3a's when the
gain passed is a_t and the ridge λ_t B_t (λ̄_t Ē_t B_t with the scale-coupled ridge): their product is η_t λ_t,
clamped alike. The reads add up the same way, for RAW and RBW alike. So falcon-3a runs as W calls of the fused
falcon-1a kernels (kernels/inner_product/fused.py), the initial state going to lag 0, with the
window's pairs, η_t, B_t and the carry prepared in PyTorch (kernels/common/prepare.py, as the chunk form does)
and differentiated through both. The final state's window tail comes from the prepared pairs.
"""

from __future__ import annotations

import torch
from torch import Tensor

from kernels.common.config import RuleConfig
from kernels.common.prepare import final_state, prepare
from kernels.common.state import FastWeightState
from kernels.inner_product.fused import triton_inner_product


def triton_falcon3a(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, cfg: RuleConfig,
                    state: FastWeightState, fresh: bool, chunk_size: int = 64,
                    cu_seqlens: Tensor | None = None) -> tuple[Tensor, FastWeightState]:
    """falcon-3a over ``[B, T, H, D]`` inputs in their own dtype from a float32 ``state``; o in q's dtype. Not
    for packed sequences: the op refuses ``cu_seqlens`` here (``kernels.common.checks.fused_refusal``)."""
    if cfg.rule != "falcon-3a":
        raise ValueError(f"triton_falcon3a runs rule 'falcon-3a' only, got {cfg.rule!r}")
    f32 = torch.float32
    prep = prepare(k.to(f32), v.to(f32), beta.to(f32), lam.to(f32), cfg, state, fresh)
    n = prep.n_pairs.clamp(min=1.0)[..., None]  # B_t, [B, T, 1]
    ridge = lam.to(f32) * prep.energy if cfg.scale_coupled_ridge else lam.to(f32)
    step, lag_ridge = prep.eta / n, ridge * n  # their product is η_t λ_t: the carry is falcon-3a's
    lag_cfg = RuleConfig(rule="falcon-1a", eps=cfg.eps, decay_floor=cfg.decay_floor, alignment="same_time",
                         timing=cfg.timing, normalize=False)
    T = q.shape[1]
    W = cfg.span
    o = None
    S = None
    for j in range(W):  # lag j: the pair j tokens back in each token's window
        start = W - 1 - j
        x_j = prep.x_ext[:, start:start + T].to(q.dtype)
        y_j = prep.y_ext[:, start:start + T].to(q.dtype)
        S_in = state.S if j == 0 else torch.zeros_like(state.S)
        lag_state = FastWeightState(S=S_in, last_key=state.last_key, x_tail=state.x_tail[:, :, :0],
                                    v_tail=state.v_tail[:, :, :0], tail_mask=state.tail_mask[:, :0])
        o_j, final_j = triton_inner_product(q, x_j, y_j, step, lag_ridge, lag_cfg, lag_state, fresh=False,
                                            chunk_size=chunk_size)
        o = o_j.to(f32) if o is None else o + o_j.to(f32)
        S = final_j.S if S is None else S + final_j.S
    return o.to(q.dtype), final_state(S, k.to(f32), prep, cfg)
