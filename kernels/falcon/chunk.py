"""The chunk-parallel form in pure PyTorch: dispatch to the file of each rule family."""

from __future__ import annotations

from torch import Tensor

from kernels.common.config import RuleConfig
from kernels.common.state import FastWeightState


def chunk_forward(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, cfg: RuleConfig,
                  state: FastWeightState, fresh: bool, chunk_size: int = 64) -> tuple[Tensor, FastWeightState]:
    if cfg.rule in ("falcon-1", "falcon-2"):
        from kernels.falcon.chunk_regression import chunk_regression as form
    elif cfg.rule == "falcon-3":
        from kernels.falcon.chunk_falcon3 import chunk_falcon3 as form
    else:
        from kernels.falcon.chunk_inner_product import chunk_inner_product as form
    return form(q, k, v, beta, lam, cfg, state, fresh, chunk_size=chunk_size)
