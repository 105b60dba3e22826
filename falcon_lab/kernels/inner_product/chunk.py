"""The chunk-parallel form of the inner-product rules falcon-1a, falcon-2a and falcon-3a (Algorithm 4).

These rules are decayed linear attention with write weight η_t / B_t, carry γ_t and a window of W pairs, so
they run on the one chunk core of ``falcon_lab.kernels.linear_attention``. The window crosses chunk boundaries: each
chunk reads its first W − 1 pairs from the extended pair sequence (the previous chunk's last pairs, or the
state's tail for the first chunk), so the result is exact for any chunk size.
"""

from __future__ import annotations

from torch import Tensor

from falcon_lab.kernels.common.config import RuleConfig
from falcon_lab.kernels.common.prepare import final_state, prepare
from falcon_lab.kernels.common.state import FastWeightState
from falcon_lab.kernels.inner_product.masked import write_weight
from falcon_lab.kernels.linear_attention.chunk import chunk_decayed_attention


def chunk_inner_product(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, cfg: RuleConfig,
                        state: FastWeightState, fresh: bool,
                        chunk_size: int = 64) -> tuple[Tensor, FastWeightState]:
    """Outputs and final state of falcon-1a/2a/3a, chunk by chunk (chunk-local log-space decay)."""
    prep = prepare(k, v, beta, lam, cfg, state, fresh)
    o, S = chunk_decayed_attention(q, prep.x_ext, prep.y_ext, prep.gamma.log(), state.S,
                                   chunk_size=chunk_size, rbw=cfg.timing == "rbw", window=cfg.span,
                                   weight=write_weight(prep))
    return o, final_state(S, k, prep, cfg)
