"""Decayed linear attention, the op behind the RetNet and Mamba-2 (SSD) baselines.

    S_t = exp(g_t) S_{t−1} + x_t v_tᵀ,    o_t = scale · S_tᵀ q_t (RAW)  or  scale · S_{t−1}ᵀ q_t (RBW)

RetNet uses a fixed per-head decay (g_t = log γ_h); Mamba-2's SSD uses g_t = Δ_t A_h, x_t = Δ_t B_t and
q_t = C_t. The state is a ``FastWeightState`` with an empty window tail, so continuation works as for the
Falcon rules.
"""

from __future__ import annotations

import numbers
from typing import Callable

import torch
from torch import Tensor

from kernels.falcon.config import ALIGNMENTS, TIMINGS
from kernels.falcon.state import FastWeightState, fresh_state
from kernels.linear_attention.chunk import chunk_decayed_attention, chunk_linear_attention
from kernels.linear_attention.naive import recurrent_linear_attention
from kernels.precision import autocast_off

LinearAttentionBackend = Callable[..., tuple[Tensor, FastWeightState]]


def _recurrent(q, k, v, log_decay, scale, shifted, rbw, state, chunk_size):
    return recurrent_linear_attention(q, k, v, log_decay, scale, shifted, rbw, state)


def _chunk(q, k, v, log_decay, scale, shifted, rbw, state, chunk_size):
    return chunk_linear_attention(q, k, v, log_decay, scale, shifted, rbw, state, chunk_size)


BACKENDS: dict[str, LinearAttentionBackend] = {"recurrent": _recurrent, "chunk": _chunk}


def _check_inputs(q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor) -> None:
    if not isinstance(q, Tensor) or q.dim() != 4:
        got = tuple(q.shape) if isinstance(q, Tensor) else type(q).__name__
        raise ValueError(f"q must be a 4-D tensor [B, T, H, Dk], got {got}")
    B, T, H, Dk = q.shape
    if T < 1:
        raise ValueError("q has T = 0 tokens; the sequence axis (dim 1) must hold at least one token")
    if not isinstance(k, Tensor) or tuple(k.shape) != (B, T, H, Dk):
        got = tuple(k.shape) if isinstance(k, Tensor) else type(k).__name__
        raise ValueError(f"k has shape {got}; expected [B, T, H, Dk] like q = {(B, T, H, Dk)}")
    if not isinstance(v, Tensor) or v.dim() != 4 or tuple(v.shape[:3]) != (B, T, H):
        got = tuple(v.shape) if isinstance(v, Tensor) else type(v).__name__
        raise ValueError(f"v has shape {got}; expected [B, T, H, Dv] with B, T, H = {(B, T, H)}")
    if not isinstance(log_decay, Tensor) or tuple(log_decay.shape) != (B, T, H):
        got = tuple(log_decay.shape) if isinstance(log_decay, Tensor) else type(log_decay).__name__
        raise ValueError(f"log_decay has shape {got}; expected [B, T, H] = {(B, T, H)} (one log decay "
                         f"g_t <= 0 per token and head)")
    for name, t in (("q", q), ("k", k), ("v", v), ("log_decay", log_decay)):
        if not t.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor (float16/bfloat16/float32/float64), "
                             f"got {t.dtype}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"q, k, v must share one dtype, got q {q.dtype}, k {k.dtype}, v {v.dtype}")
    devices = {t.device for t in (q, k, v, log_decay)}
    if len(devices) > 1:
        raise ValueError(f"q, k, v, log_decay must be on one device, got {sorted(map(str, devices))}")


def _start(q: Tensor, v: Tensor, initial_state: FastWeightState | Tensor | None,
           dtype: torch.dtype) -> FastWeightState:
    """The state to start from; None or a bare S starts a fresh sequence (no last key)."""
    B, _, H, Dk = q.shape
    Dv = v.shape[-1]
    if initial_state is None or isinstance(initial_state, Tensor):
        if isinstance(initial_state, Tensor) and tuple(initial_state.shape) != (B, H, Dk, Dv):
            raise ValueError(f"initial_state has shape {tuple(initial_state.shape)}; expected S of shape "
                             f"[B, H, Dk, Dv] = {(B, H, Dk, Dv)} or a FastWeightState")
        return fresh_state(B, H, Dk, Dv, 1, dtype, q.device, initial_state)
    if not isinstance(initial_state, FastWeightState):
        raise ValueError(f"initial_state must be None, a tensor S or a FastWeightState, "
                         f"got {type(initial_state).__name__}")
    expected = {"S": (B, H, Dk, Dv), "last_key": (B, H, Dk), "x_tail": (B, H, 0, Dk),
                "v_tail": (B, H, 0, Dv), "tail_mask": (B, 0)}
    for field, shape in expected.items():
        t = getattr(initial_state, field)
        if not isinstance(t, Tensor) or tuple(t.shape) != shape:
            got = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
            raise ValueError(f"initial_state.{field} has shape {got}; expected {shape} (linear attention "
                             f"keeps no window tail)")
    st = initial_state
    return FastWeightState(st.S.to(dtype), st.last_key.to(dtype), st.x_tail.to(dtype), st.v_tail.to(dtype),
                           st.tail_mask.bool())


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
    if alignment not in ALIGNMENTS:
        raise ValueError(f"alignment={alignment!r}; accepted: {', '.join(ALIGNMENTS)}")
    if timing not in TIMINGS:
        raise ValueError(f"timing={timing!r}; accepted: {', '.join(TIMINGS)}")
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}; accepted: {', '.join(BACKENDS)}")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be an integer >= 1, got {chunk_size!r}")
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise ValueError(f"scale must be a real number, got {scale!r}")
    _check_inputs(q, k, v, log_decay)
    out_dtype = q.dtype
    dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    state = _start(q, v, initial_state, dtype)
    q, k, v, log_decay = (t.to(dtype) for t in (q, k, v, log_decay))
    o, final = BACKENDS[backend](q, k, v, log_decay, float(scale), alignment == "shifted", timing == "rbw",
                                state, chunk_size)
    return o.to(out_dtype), (final if output_final_state else None)


__all__ = ["BACKENDS", "chunk_decayed_attention", "linear_attention"]
