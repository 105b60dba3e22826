"""Small helpers shared by the Triton kernels of the Falcon rules (inner-product and regression families).

Packed sequences (``cu_seqlens``) are split into chunks per sequence, as fla does: one program per chunk,
each knowing its sequence and its chunk number inside it.
"""

from __future__ import annotations

import os

import torch
from torch import Tensor


def interpreting() -> bool:
    """True when Triton runs its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def chunk_table(cu_seqlens: Tensor, chunk_size: int) -> tuple[Tensor, Tensor]:
    """Chunk indices of packed sequences.

    Returns ``chunk_indices`` ``[NT, 2]`` int32 (sequence n, chunk c inside it) for every chunk of every
    sequence in order, and ``chunk_offsets`` ``[N + 1]`` int32: the first chunk of sequence n is row
    ``chunk_offsets[n]``. A sequence of length L has ``ceil(L / chunk_size)`` chunks, the last one short.
    """
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).long()
    n_chunks = (lengths + chunk_size - 1) // chunk_size
    chunk_offsets = torch.zeros(n_chunks.numel() + 1, dtype=torch.long, device=cu_seqlens.device)
    chunk_offsets[1:] = torch.cumsum(n_chunks, 0)
    total = int(chunk_offsets[-1])
    seq = torch.repeat_interleave(torch.arange(n_chunks.numel(), device=cu_seqlens.device), n_chunks)
    within = torch.arange(total, device=cu_seqlens.device) - chunk_offsets[seq]
    return torch.stack([seq, within], 1).to(torch.int32).contiguous(), chunk_offsets.to(torch.int32)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n (and >= 16, the least size ``tl.dot`` accepts)."""
    return max(16, 1 << (max(n, 1) - 1).bit_length())
