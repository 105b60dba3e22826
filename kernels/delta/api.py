"""The public gated-delta-rule op: validation, alignment of the write feature, state in and out."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from kernels.delta.naive import recurrent_gated_delta_rule
from kernels.falcon.config import ALIGNMENTS, TIMINGS
from kernels.falcon.state import FastWeightState, fresh_state
from kernels.precision import autocast_off

Backend = Callable[..., tuple[Tensor, Tensor]]


def _chunk(q, x, v, g, beta, scale, timing, S0, chunk_size):
    from kernels.delta.chunk import chunk_gated_delta_rule

    return chunk_gated_delta_rule(q, x, v, g, beta, scale, timing, S0, chunk_size=chunk_size)


def _recurrent(q, x, v, g, beta, scale, timing, S0, chunk_size):
    return recurrent_gated_delta_rule(q, x, v, g, beta, scale, timing, S0)


DELTA_BACKENDS: dict[str, Backend] = {"recurrent": _recurrent, "chunk": _chunk}


def _check_inputs(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor) -> None:
    """Shapes, dtypes and devices; every error names the argument and what is accepted."""
    if not isinstance(q, Tensor) or q.dim() != 4:
        got = tuple(q.shape) if isinstance(q, Tensor) else type(q).__name__
        raise ValueError(f"q must be a 4-D tensor [B, T, H, Dk], got {got}")
    B, T, H, Dk = q.shape
    if T < 1:
        raise ValueError("q has T = 0 tokens; the sequence axis (dim 1) must hold at least one token")
    expected = {"k": ((B, T, H, Dk), "[B, T, H, Dk] like q"), "g": ((B, T, H), "[B, T, H]"),
                "beta": ((B, T, H), "[B, T, H]")}
    for name, t in (("k", k), ("g", g), ("beta", beta)):
        shape, what = expected[name]
        if not isinstance(t, Tensor) or tuple(t.shape) != shape:
            got = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
            raise ValueError(f"{name} has shape {got}; expected {what} = {shape}")
    if not isinstance(v, Tensor) or v.dim() != 4 or tuple(v.shape[:3]) != (B, T, H):
        got = tuple(v.shape) if isinstance(v, Tensor) else type(v).__name__
        raise ValueError(f"v has shape {got}; expected [B, T, H, Dv] with B, T, H = {(B, T, H)}")
    for name, t in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta)):
        if not t.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor (float16/bfloat16/float32/float64), "
                             f"got {t.dtype}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"q, k, v must share one dtype, got q {q.dtype}, k {k.dtype}, v {v.dtype}")
    devices = {t.device for t in (q, k, v, g, beta)}
    if len(devices) > 1:
        raise ValueError(f"q, k, v, g, beta must be on one device, got {sorted(map(str, devices))}")


def _start(q: Tensor, v: Tensor, initial_state: FastWeightState | Tensor | None,
           dtype: torch.dtype) -> tuple[FastWeightState, bool]:
    """The state to start from and whether the sequence is fresh (None or a bare S start fresh)."""
    B, _, H, Dk = q.shape
    Dv = v.shape[-1]
    if initial_state is None or isinstance(initial_state, Tensor):
        if isinstance(initial_state, Tensor) and tuple(initial_state.shape) != (B, H, Dk, Dv):
            raise ValueError(f"initial_state has shape {tuple(initial_state.shape)}; expected S of shape "
                             f"[B, H, Dk, Dv] = {(B, H, Dk, Dv)} or a FastWeightState")
        if isinstance(initial_state, Tensor) and not initial_state.is_floating_point():
            raise ValueError(f"initial_state must be a floating-point tensor, got {initial_state.dtype}")
        return fresh_state(B, H, Dk, Dv, 1, dtype, q.device, initial_state), True
    if not isinstance(initial_state, FastWeightState):
        raise ValueError(f"initial_state must be None, a tensor S or a FastWeightState, "
                         f"got {type(initial_state).__name__}")
    expected = {"S": (B, H, Dk, Dv), "last_key": (B, H, Dk)}
    for field, shape in expected.items():
        t = getattr(initial_state, field)
        if not isinstance(t, Tensor) or tuple(t.shape) != shape:
            got = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
            raise ValueError(f"initial_state.{field} has shape {got}; expected {shape}")
    if initial_state.x_tail.shape[2] != 0:
        raise ValueError(f"initial_state holds a window tail of {initial_state.x_tail.shape[2]} pairs; the "
                         f"gated delta rule continues from a span-1 state (an empty tail)")
    return fresh_state(B, H, Dk, Dv, 1, dtype, q.device, initial_state.S)._replace(
        last_key=initial_state.last_key.to(dtype)), False


@autocast_off
def gated_delta_rule(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, *, scale: float = 1.0,
    alignment: str = "same_time", timing: str = "raw", backend: str = "chunk", chunk_size: int = 64,
    initial_state: FastWeightState | Tensor | None = None, output_final_state: bool = False,
) -> tuple[Tensor, FastWeightState | None]:
    """The gated delta rule ``S_t = exp(g_t)(I − β_t x_t x_tᵀ) S_{t−1} + β_t x_t v_tᵀ`` over a sequence.

    DeltaNet is ``g = 0``; Gated DeltaNet passes its log forget gate ``g ≤ 0``.

    Args:
        q, k: ``[B, T, H, Dk]`` queries and keys (featurised and normalised by the layer). v: ``[B, T, H, Dv]``.
        g: ``[B, T, H]`` log decay, ≤ 0. beta: ``[B, T, H]`` the writing strength β_t.
        scale: the read is ``o_t = scale · Sᵀ q_t``.
        alignment: ``"same_time"`` (x_t = k_t) or ``"shifted"`` (x_t = k_{t−1}; on a fresh sequence x_1 = 0,
            so the first token writes nothing; its decay exp(g_1) still applies to the initial S).
        timing: ``"raw"`` (read S_t) or ``"rbw"`` (read S_{t−1}).
        backend: ``"recurrent"`` (the loop, the oracle) or ``"chunk"`` (chunk-parallel WY form).
        chunk_size: C of the chunk form; any T works (the last chunk may be short).
        initial_state: a ``FastWeightState`` to continue from (S and the last key), a bare S (a fresh
            sequence starting from S), or None (a fresh sequence from S = 0).
        output_final_state: return the state for exact continuation.

    Returns:
        o ``[B, T, H, Dv]`` in q's dtype, and the final ``FastWeightState`` (or None). The state is fp32
        (float64 for float64 inputs).
    """
    if alignment not in ALIGNMENTS:
        raise ValueError(f"alignment={alignment!r}; accepted: {', '.join(ALIGNMENTS)}")
    if timing not in TIMINGS:
        raise ValueError(f"timing={timing!r}; accepted: {', '.join(TIMINGS)}")
    if backend not in DELTA_BACKENDS:
        raise ValueError(f"backend={backend!r}; accepted: {', '.join(DELTA_BACKENDS)}")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be an integer >= 1, got {chunk_size!r}")
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise ValueError(f"scale must be a real number, got {scale!r}")
    _check_inputs(q, k, v, g, beta)
    out_dtype = q.dtype
    dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    state, fresh = _start(q, v, initial_state, dtype)
    q, k, v, g, beta = (t.to(dtype) for t in (q, k, v, g, beta))
    if alignment == "shifted":
        first = torch.zeros_like(state.last_key) if fresh else state.last_key
        x = torch.cat([first[:, None], k[:, :-1]], dim=1)
    else:
        x = k
    o, S = DELTA_BACKENDS[backend](q, x, v, g, beta, float(scale), timing, state.S, chunk_size)
    final = state._replace(S=S, last_key=k[:, -1]) if output_final_state else None
    return o.to(out_dtype), final
