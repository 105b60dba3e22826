"""What the host knows of packed sequences, read from the device once per ``cu_seqlens`` tensor.

A model over isolated samples makes one ``cu_seqlens`` a step and hands it to every layer, forward and backward.
Each layer's kernels need host-side facts of it (the offsets, the longest sequence, the chunk table's size, the
launch groups), and every read of a device tensor on the host waits for the device to finish what it was given:
read per layer, a six-layer model waited 19 times a step. Here each fact is computed once per tensor object, as
fla's ``tensor_cache`` does, keyed by the tensor's identity and version (an in-place change makes a new key) and
held for the last few tensors only: the layers after the first find it made.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import TypeVar

import numpy as np
import torch
from torch import Tensor

T = TypeVar("T")

SLOTS = 64  # facts kept (a few per cu_seqlens: its host copy, its chunk tables, its launch groups)
_facts: OrderedDict[tuple, tuple[weakref.ref, object]] = OrderedDict()


def memo(t: Tensor, what: Hashable, make: Callable[[], T]) -> T:
    """``make()``, computed once per (tensor object, version, ``what``) among the last ``SLOTS``. Tensors without
    a version counter (inference tensors) are not remembered."""
    try:
        key = (id(t), t._version, what)
    except RuntimeError:  # an inference tensor: no version to tell an in-place change by
        return make()
    hit = _facts.get(key)
    if hit is not None and hit[0]() is t:  # the same object, not a later one at a reused address
        _facts.move_to_end(key)
        return hit[1]  # type: ignore[return-value]
    value = make()
    _facts[key] = (weakref.ref(t), value)
    while len(_facts) > SLOTS:
        _facts.popitem(last=False)
    return value


def as_int32(cu_seqlens: Tensor, device: torch.device) -> Tensor:
    """``cu_seqlens`` as the kernels read it: int32, contiguous, on ``device`` (one tensor for every layer, which
    shares the host copy of the one it was made from)."""
    def make() -> Tensor:
        made = cu_seqlens.to(device=device, dtype=torch.int32).contiguous()
        if made is not cu_seqlens:
            memo(made, "host", lambda: on_host(cu_seqlens))
        return made

    return memo(cu_seqlens, ("int32", str(device)), make)


def ids_int32(sample_id: Tensor, device: torch.device) -> Tensor:
    """Per-token sample ids as the kernels read them: int32, contiguous, on ``device``, made once per tensor for
    every layer, with no host read."""
    return memo(sample_id, ("ids int32", str(device)),
                lambda: sample_id.to(device=device, dtype=torch.int32).contiguous())


def on_host(cu_seqlens: Tensor) -> np.ndarray:
    """``cu_seqlens`` as int64 on the host: the one wait for the device; every fact below is read from it."""
    return memo(cu_seqlens, "host", lambda: to_host(cu_seqlens))


def to_host(t: Tensor) -> np.ndarray:
    """A copy of ``t`` in host memory as int64 (numpy): on a GPU the host waits here for the device."""
    return t.detach().to("cpu", torch.int64).numpy().copy()


def offsets(cu_seqlens: Tensor) -> tuple[int, ...]:
    """The N + 1 offsets as Python ints (a tuple: the layers share it)."""
    return memo(cu_seqlens, "offsets", lambda: tuple(on_host(cu_seqlens).tolist()))


def lengths(cu_seqlens: Tensor) -> np.ndarray:
    """The N sequence lengths."""
    return memo(cu_seqlens, "lengths", lambda: np.diff(on_host(cu_seqlens)))


def longest(cu_seqlens: Tensor) -> int:
    """The longest sequence's length."""
    return memo(cu_seqlens, "longest", lambda: int(lengths(cu_seqlens).max()))


def chunk_count(cu_seqlens: Tensor, chunk_size: int) -> int:
    """The chunks of ``chunk_size`` the sequences take, each sequence's last one short."""
    return memo(cu_seqlens, ("chunks", chunk_size),
                lambda: int(((lengths(cu_seqlens) + chunk_size - 1) // chunk_size).sum()))
