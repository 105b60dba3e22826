"""CUDA's launch limits for the fused kernels: their grids put B·H (N·H for packed sequences) and the chunk count
(times up to ``SLOTS_PER_CHUNK`` row blocks a chunk) on launch axes 1 and 2, which CUDA caps at 65,535. A batch or a
set of packed sequences past that runs in slices that fit (rows and packed sequences are independent), their
outputs and final states joined; autograd sees each slice's own graph. Every entry to the kernels goes through
these (``falcon_lab.kernels.falcon.dispatch`` for the Falcon rules; the gated delta rule and decayed attention on their own).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from falcon_lab.kernels.common import packed
from falcon_lab.kernels.common.config import CHUNK_SIZES

MAX_GRID_ROWS = 65_535  # CUDA's limit on launch axes 1 and 2
# the most launch rows one chunk takes: falcon-2a's blocks of 16 tokens in the longest chunk
SLOTS_PER_CHUNK = max(CHUNK_SIZES) // 16


def row_groups(B: int, T: int, H: int, chunk_size: int) -> list[tuple[int, int]]:
    """Runs [i, j) of batch rows, each within the limits (one run, [0, B), when the whole batch is)."""
    per_row = max(H, SLOTS_PER_CHUNK * -(-T // chunk_size))
    if B * per_row <= MAX_GRID_ROWS:
        return [(0, B)]
    rows = max(1, MAX_GRID_ROWS // per_row)
    return [(i, min(i + rows, B)) for i in range(0, B, rows)]


def sequence_groups(bounds: Sequence[int] | Tensor, heads: int, chunk_size: int) -> list[tuple[int, int]]:
    """Runs [i, j) of consecutive packed sequences, each within the limits: (j − i)·H sequences and its chunks'
    launch rows at most MAX_GRID_ROWS. ``bounds``: the N + 1 offsets, a list or ``cu_seqlens`` itself, whose groups are
    made once per tensor from its host copy (``falcon_lab.kernels.common.packed``); the common case, every sequence within
    the limits at once, is one reduction there, no loop over the sequences in Python."""
    if isinstance(bounds, Tensor):
        cu_seqlens = bounds
        return packed.memo(cu_seqlens, ("groups", heads, chunk_size),
                           lambda: _groups_of(cu_seqlens, heads, chunk_size))
    groups, start, slots = [], 0, 0
    for n, (b, e) in enumerate(zip(bounds, bounds[1:])):
        need = SLOTS_PER_CHUNK * -(-(e - b) // chunk_size)
        if n > start and ((n + 1 - start) * heads > MAX_GRID_ROWS or slots + need > MAX_GRID_ROWS):
            groups.append((start, n))
            start, slots = n, 0
        slots += need
    groups.append((start, len(bounds) - 1))
    return groups


def _groups_of(cu_seqlens: Tensor, heads: int, chunk_size: int) -> list[tuple[int, int]]:
    n = cu_seqlens.numel() - 1
    if n * heads <= MAX_GRID_ROWS and SLOTS_PER_CHUNK * packed.chunk_count(cu_seqlens, chunk_size) <= MAX_GRID_ROWS:
        return [(0, n)]
    return sequence_groups(packed.offsets(cu_seqlens), heads, chunk_size)


def joined(parts: list[tuple[Tensor, object]], dim: int) -> tuple[Tensor, object]:
    """Outputs joined along ``dim`` (0: batch rows, 1: packed time); final states (a tensor, a NamedTuple of them,
    or None) along their rows."""
    outs, finals = zip(*parts)
    first = finals[0]
    if first is None:
        final = None
    elif isinstance(first, Tensor):
        final = torch.cat(finals, 0)
    else:
        final = type(first)(*(torch.cat(f, 0) for f in zip(*finals)))
    return torch.cat(outs, dim), final
