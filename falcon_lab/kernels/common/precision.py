"""Precision shared by the ops: their state, solves and decays run in fp32/fp64 whatever autocast says."""

from __future__ import annotations

import functools
from typing import Callable, TypeVar

import torch

F = TypeVar("F", bound=Callable)


def autocast_off(fn: F) -> F:
    """Run ``fn`` with autocast disabled on every device type, so an op called inside a bf16-mixed
    training step keeps the precision it chose (fp32 state; bf16 only where a kernel asks for it)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with torch.autocast("cuda", enabled=False), torch.autocast("cpu", enabled=False):
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """State and accumulation precision: float64 for float64 inputs, float32 otherwise."""
    return torch.float64 if dtype == torch.float64 else torch.float32
