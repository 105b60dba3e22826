"""The state a rule hands from one segment to the next."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor


class FastWeightState(NamedTuple):
    """Everything exact continuation needs (SPEC §1, paper appendix C.7).

    S:         ``[B, H, Dk, Dv]`` the fast weights (fp32, or float64 when the inputs are).
    last_key:  ``[B, H, Dk]`` the last key seen; the next pair's write feature under shifted alignment.
    x_tail:    ``[B, H, W−1, Dk]`` write features of the last W−1 pairs, oldest first (W = window for 3/3a,
               else 1, so the tail is empty).
    v_tail:    ``[B, H, W−1, Dv]`` their targets.
    tail_mask: ``[B, W−1]`` bool, True where a tail slot holds a real pair (the fresh boundary pair and the
               slots before the first token are not pairs).
    """

    S: Tensor
    last_key: Tensor
    x_tail: Tensor
    v_tail: Tensor
    tail_mask: Tensor


def fresh_state(batch: int, heads: int, dk: int, dv: int, span: int, dtype: torch.dtype,
                device: torch.device | str, S: Tensor | None = None) -> FastWeightState:
    """A state for a fresh sequence: ``S = 0`` (or the given S), no last key, an empty window tail."""
    if S is None:
        S = torch.zeros(batch, heads, dk, dv, dtype=dtype, device=device)
    return FastWeightState(
        S=S.to(dtype),
        last_key=torch.zeros(batch, heads, dk, dtype=dtype, device=device),
        x_tail=torch.zeros(batch, heads, span - 1, dk, dtype=dtype, device=device),
        v_tail=torch.zeros(batch, heads, span - 1, dv, dtype=dtype, device=device),
        tail_mask=torch.zeros(batch, span - 1, dtype=torch.bool, device=device),
    )
