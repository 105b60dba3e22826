"""The masked-parallel (O(T²)) form: dispatch to the file of each rule family."""

from __future__ import annotations

from torch import Tensor

from kernels.common.config import RuleConfig
from kernels.common.state import FastWeightState


def masked_forward(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, cfg: RuleConfig,
                   state: FastWeightState, fresh: bool) -> tuple[Tensor, FastWeightState]:
    if cfg.rule in ("falcon-1", "falcon-2"):
        from kernels.falcon.masked_regression import masked_regression as form
    elif cfg.rule == "falcon-3":
        from kernels.falcon.masked_falcon3 import masked_falcon3 as form
    else:
        from kernels.falcon.masked_inner_product import masked_inner_product as form
    return form(q, k, v, beta, lam, cfg, state, fresh)
