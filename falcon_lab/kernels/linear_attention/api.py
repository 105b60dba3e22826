"""The public decayed-linear-attention op: validation, precision, state in and out."""

from __future__ import annotations

from typing import Callable

from torch import Tensor

from falcon_lab.kernels.common.checks import (check_floating_on_one_device, check_qkv, check_real, check_sequence_options,
                                   check_shape, start_state)
from falcon_lab.kernels.common.precision import autocast_off, compute_dtype
from falcon_lab.kernels.common.state import FastWeightState
from falcon_lab.kernels.linear_attention.chunk import chunk_linear_attention
from falcon_lab.kernels.linear_attention.naive import recurrent_linear_attention

LinearAttentionBackend = Callable[..., tuple[Tensor, FastWeightState]]


def _recurrent(q, k, v, log_decay, scale, shifted, rbw, state, chunk_size):
    return recurrent_linear_attention(q, k, v, log_decay, scale, shifted, rbw, state)


def _chunk(q, k, v, log_decay, scale, shifted, rbw, state, chunk_size):
    return chunk_linear_attention(q, k, v, log_decay, scale, shifted, rbw, state, chunk_size)


BACKENDS: dict[str, LinearAttentionBackend] = {"recurrent": _recurrent, "chunk": _chunk}


@autocast_off
def linear_attention(
    q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, *, scale: float = 1.0, alignment: str = "same_time",
    timing: str = "raw", backend: str = "chunk", chunk_size: int = 64,
    initial_state: FastWeightState | Tensor | None = None, output_final_state: bool = False,
) -> tuple[Tensor, FastWeightState | None]:
    """Run decayed linear attention over a sequence.

    Args:
        q, k: ``[B, T, H, Dk]``. v: ``[B, T, H, Dv]``.
        log_decay: g_t ``[B, T, H]``, the log of the per-token carry (<= 0; the carry is exp(g_t)).
        scale: multiplies every read (e.g. Dk^−½).
        alignment: ``"same_time"`` (x_t = k_t) or ``"shifted"`` (x_t = k_{t−1}; x_1 = 0 fresh, or the last
            key of the previous segment when continuing).
        timing: ``"raw"`` (read S_t) or ``"rbw"`` (read S_{t−1}).
        backend: ``"chunk"`` (chunk-parallel, O(T·C)) or ``"recurrent"`` (the oracle, a loop over tokens).
        chunk_size: chunk length C of the chunk backend.
        initial_state: a ``FastWeightState`` to continue from, a bare S (a fresh sequence starting from S),
            or None (a fresh sequence from S = 0).
        output_final_state: return the state for exact continuation.

    Returns:
        o ``[B, T, H, Dv]`` in q's dtype, and the final state (or None). State and accumulation run in
        float32 (float64 for float64 inputs).
    """
    check_sequence_options(alignment=alignment, timing=timing, backend=backend, backends=tuple(BACKENDS),
                           chunk_size=chunk_size)
    check_real("scale", scale)
    B, T, H, _, _ = check_qkv(q, k, v)
    check_shape("log_decay", log_decay, (B, T, H), "[B, T, H] (one log decay g_t <= 0 per token and head)")
    check_floating_on_one_device(q=q, k=k, v=v, log_decay=log_decay)
    out_dtype = q.dtype
    dtype = compute_dtype(q.dtype)
    state, _ = start_state(q, v, initial_state, dtype)
    q, k, v, log_decay = (t.to(dtype) for t in (q, k, v, log_decay))
    o, final = BACKENDS[backend](q, k, v, log_decay, float(scale), alignment == "shifted", timing == "rbw",
                                state, chunk_size)
    return o.to(out_dtype), (final if output_final_state else None)

