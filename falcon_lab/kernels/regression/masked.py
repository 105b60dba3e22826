"""The masked-parallel (O(T²)) form of the regression rules falcon-1 and falcon-2.

The whole sequence is one chunk of the WY core: one T×T unit-lower-triangular solve (batched over the Dv
columns for falcon-2, sharing the T×T Gram), with decays exp(Σ_{r=s+1}^{t} log γ_r) formed for s ≤ t only.
"""

from __future__ import annotations

from torch import Tensor

from falcon_lab.kernels.common.config import RuleConfig
from falcon_lab.kernels.common.state import FastWeightState
from falcon_lab.kernels.regression.chunk import regression_on_core


def masked_regression(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, cfg: RuleConfig,
                      state: FastWeightState, fresh: bool) -> tuple[Tensor, FastWeightState]:
    """falcon-1/2 over the whole sequence at once."""
    return regression_on_core(q, k, v, beta, lam, cfg, state, fresh, chunk_size=q.shape[1])
