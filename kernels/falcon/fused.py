"""``backend="triton"``: the fused chunk kernels, one module per rule family (falcon-3a on falcon-1a's).

They take q, k, v, beta, lam in their own dtype (bf16 or fp32) and fuse the pairing, η, γ and the
chunk-local decay themselves; the state stays fp32.
"""

from __future__ import annotations

import torch
from torch import Tensor

from kernels.common.config import RuleConfig
from kernels.common.state import FastWeightState

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
    # The grids put B·H (N·H packed) and the chunk count (times up to 4 row blocks a chunk) on launch axes 1 and 2,
    # which CUDA caps at 65,535: a batch or a set of packed sequences past that runs in slices that fit (rows and
    # sequences are independent), outputs and final states joined; autograd sees each slice's own graph.
    B, T, H = q.shape[0], q.shape[1], q.shape[2]
    if cu_seqlens is None:
        per_row = max(H, _SLOTS_PER_CHUNK * -(-T // chunk_size))
        if B * per_row > MAX_GRID_ROWS:
            rows = max(1, MAX_GRID_ROWS // per_row)
            return _joined([form(*(t[i:i + rows] for t in (q, k, v, beta, lam)), cfg,
                                 FastWeightState(*(s[i:i + rows] for s in state)), fresh, chunk_size=chunk_size)
                            for i in range(0, B, rows)], dim=0)
    else:
        bounds = [int(b) for b in cu_seqlens.tolist()]
        groups = _sequence_groups(bounds, H, chunk_size)
        if len(groups) > 1:
            parts = []
            for i, j in groups:
                b, e = bounds[i], bounds[j]
                parts.append(form(*(t[:, b:e] for t in (q, k, v, beta, lam)), cfg,
                                  FastWeightState(*(s[i:j] for s in state)), fresh, chunk_size=chunk_size,
                                  cu_seqlens=cu_seqlens[i:j + 1] - cu_seqlens[i]))
            return _joined(parts, dim=1)
    return form(q, k, v, beta, lam, cfg, state, fresh, chunk_size=chunk_size, cu_seqlens=cu_seqlens)


_SLOTS_PER_CHUNK = 4  # the most launch rows one chunk takes (falcon-2a's 16-token blocks in a chunk of 64)


def _sequence_groups(bounds: list[int], heads: int, chunk_size: int) -> list[tuple[int, int]]:
    """Runs [i, j) of consecutive packed sequences, each within the launch-axis limits: (j − i)·H sequences
    and its chunks' launch rows at most MAX_GRID_ROWS."""
    groups, start, slots = [], 0, 0
    for n, (b, e) in enumerate(zip(bounds, bounds[1:])):
        need = _SLOTS_PER_CHUNK * -(-(e - b) // chunk_size)
        if n > start and ((n + 1 - start) * heads > MAX_GRID_ROWS or slots + need > MAX_GRID_ROWS):
            groups.append((start, n))
            start, slots = n, 0
        slots += need
    groups.append((start, len(bounds) - 1))
    return groups


def _joined(parts: list[tuple[Tensor, FastWeightState]], dim: int) -> tuple[Tensor, FastWeightState]:
    """Outputs joined along ``dim`` (0: batch rows, 1: packed time), final states along their rows."""
    outs, finals = zip(*parts)
    return torch.cat(outs, dim), FastWeightState(*(torch.cat(f, 0) for f in zip(*finals)))
