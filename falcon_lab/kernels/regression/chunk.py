"""The chunk-parallel form of the regression rules falcon-1 and falcon-2 (paper §4.2, appendices E-G).

Both run on the WY core shared with the gated delta rule (``falcon_lab.kernels.delta.wy``) with a = log γ, the step
η and the write w = η ⊙ y: falcon-1 has one (γ_t, η_t) shared by the value columns, so each chunk solves one
unit-lower-triangular system with Dv right-hand sides; falcon-2 has its own (γ_{t,j}, η_{t,j}) per column,
so each chunk solves Dv such systems in one batched solve, all sharing the chunk Gram X Xᵀ.
"""

from __future__ import annotations

import torch
from torch import Tensor

from falcon_lab.kernels.common.config import RuleConfig
from falcon_lab.kernels.common.prepare import final_state, prepare
from falcon_lab.kernels.common.state import FastWeightState
from falcon_lab.kernels.delta.wy import wy_forward


def regression_on_core(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, cfg: RuleConfig,
                       state: FastWeightState, fresh: bool, chunk_size: int) -> tuple[Tensor, FastWeightState]:
    """falcon-1/2 over the WY core with chunks of ``chunk_size`` tokens (``chunk_size ≥ T``: one chunk)."""
    prep = prepare(k, v, beta, lam, cfg, state, fresh)
    eta, gamma = prep.eta, prep.gamma
    if not cfg.per_channel:
        eta, gamma = eta[..., None], gamma[..., None]  # one channel shared by the Dv columns
    # γ ≥ ε_γ > 0 (the clamp), so log γ is finite and ≤ 0
    o, S = wy_forward(q, prep.x, eta * prep.y, torch.log(gamma), eta, state.S, cfg.timing, chunk_size)
    return o, final_state(S, k, prep, cfg)


def chunk_regression(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, cfg: RuleConfig,
                     state: FastWeightState, fresh: bool, chunk_size: int = 64) -> tuple[Tensor, FastWeightState]:
    """falcon-1/2, chunk-parallel with chunk size C (any T; the last chunk may be short)."""
    return regression_on_core(q, k, v, beta, lam, cfg, state, fresh, chunk_size)
