"""``backend="triton"``: the fused chunk kernels, one module per rule family (falcon-3a on falcon-1a's).

They take q, k, v, beta, lam in their own dtype (bf16 or fp32) and fuse the pairing, η, γ and the
chunk-local decay themselves; the state stays fp32.
"""

from __future__ import annotations

import torch
from torch import Tensor

from kernels.falcon.config import RuleConfig
from kernels.falcon.state import FastWeightState

TRITON_RULES = ("falcon-1", "falcon-2", "falcon-1a", "falcon-2a", "falcon-3a")
TRITON_CHUNK_SIZES = (16, 32, 64)  # accepted by every fused rule
TRITON_MIN_DECAY_FLOOR_PER_CHANNEL = 1e-3  # falcon-2a's 16-token blocks factor its carry around their midpoint
MAX_GRID_ROWS = 65_535  # CUDA's limit on launch axes 1 and 2, where the kernels put B·H (or N·H)


def auto_backend(q: Tensor, v: Tensor, cfg: RuleConfig, chunk_size: int, packed: bool = False) -> str:
    """``backend="auto"``: the fused kernels where they apply (CUDA, half or single precision, a rule they
    cover, Dk and Dv ≤ 256, a chunk size they take; falcon-3a not for packed sequences), else the PyTorch
    chunk form."""
    fits = (q.is_cuda and q.dtype in (torch.bfloat16, torch.float16, torch.float32)
            and cfg.rule in TRITON_RULES and max(q.shape[-1], v.shape[-1]) <= 256
            and chunk_size in TRITON_CHUNK_SIZES
            and not (cfg.rule == "falcon-2a" and cfg.decay_floor < TRITON_MIN_DECAY_FLOOR_PER_CHANNEL)
            and not (cfg.rule == "falcon-3a" and packed))
    return "triton" if fits else "chunk"


def triton_forward(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, cfg: RuleConfig,
                   state: FastWeightState, fresh: bool, chunk_size: int = 64,
                   cu_seqlens: Tensor | None = None) -> tuple[Tensor, FastWeightState]:
    if cfg.rule in ("falcon-1a", "falcon-2a"):
        from kernels.falcon.triton_inner_product import triton_inner_product as form
    elif cfg.rule in ("falcon-1", "falcon-2"):
        from kernels.falcon.triton_regression import triton_regression as form
    elif cfg.rule == "falcon-3a":  # W falcon-1a recurrences over the window's lags
        from kernels.falcon.triton_falcon3a import triton_falcon3a as form
    else:
        raise ValueError(f"backend='triton' covers {', '.join(TRITON_RULES)}; for {cfg.rule} use "
                         f"backend='chunk'")
    B, H = q.shape[0], q.shape[2]
    if cu_seqlens is None and B * H > MAX_GRID_ROWS:
        # The grids put B·H on a launch axis capped at 65,535: run the batch in slices that fit (rows are
        # independent sequences) and join outputs and final states; autograd sees the slices' own graphs.
        rows = max(1, MAX_GRID_ROWS // H)
        parts = [form(*(t[i:i + rows] for t in (q, k, v, beta, lam)), cfg,
                      FastWeightState(*(s[i:i + rows] for s in state)), fresh, chunk_size=chunk_size)
                 for i in range(0, B, rows)]
        outs, finals = zip(*parts)
        final = None if finals[0] is None else FastWeightState(*(torch.cat(f, 0) for f in zip(*finals)))
        return torch.cat(outs, 0), final
    return form(q, k, v, beta, lam, cfg, state, fresh, chunk_size=chunk_size, cu_seqlens=cu_seqlens)
