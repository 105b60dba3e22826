"""The masked-parallel form of falcon-3: the whole sequence as one block (O(T²W²) memory, one solve).

The pseudo-values of every token and window slot solve a single unit block-lower-triangular system of
size T·W (see ``falcon_lab.kernels.window.solve``); outputs and the final state are then masked, decayed linear attention
over those pseudo-values plus the decayed read of the initial state.
"""

from __future__ import annotations

import torch
from torch import Tensor

from falcon_lab.kernels.common.config import RuleConfig
from falcon_lab.kernels.common.prepare import final_state, prepare
from falcon_lab.kernels.common.state import FastWeightState
from falcon_lab.kernels.window.eigen import top_eigenvalue
from falcon_lab.kernels.window.solve import block_exit, block_read, entry_drive, solve_pseudo_values, window_inputs


def masked_falcon3(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, cfg: RuleConfig,
                   state: FastWeightState, fresh: bool) -> tuple[Tensor, FastWeightState]:
    """Falcon-3 over ``[B, T, H, D]`` inputs in one masked pass. Returns (o ``[B, T, H, Dv]``, final state)."""
    if not (cfg.windowed and cfg.regression):
        raise ValueError(f"masked_falcon3 runs rule 'falcon-3' only, got {cfg.rule!r}")
    prep = prepare(k, v, beta, lam, cfg, state, fresh, top_eigenvalue)
    xw, vw, a, log_gamma = window_inputs(prep, cfg.span)
    g = torch.cumsum(log_gamma, dim=-1)  # log-prefix of the carries from S_0
    S0 = state.S
    u = solve_pseudo_values(xw, a, g, entry_drive(xw, vw, a, g, S0))
    o = block_read(q.transpose(1, 2), xw, u, g, S0, raw=cfg.timing == "raw")
    S = block_exit(xw, u, g, S0)
    return o.transpose(1, 2), final_state(S, k, prep, cfg)
