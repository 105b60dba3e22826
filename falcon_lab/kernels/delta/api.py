"""The public gated-delta-rule op: validation, alignment of the write feature, state in and out."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from falcon_lab.kernels.common.checks import (check_floating_on_one_device, check_qkv, check_real, check_sequence_options,
                                   check_shape, start_state)
from falcon_lab.kernels.common.precision import autocast_off, compute_dtype
from falcon_lab.kernels.common.state import FastWeightState
from falcon_lab.kernels.delta.naive import recurrent_gated_delta_rule

Backend = Callable[..., tuple[Tensor, Tensor]]


def _chunk(q, x, v, g, beta, scale, timing, S0, chunk_size):
    from falcon_lab.kernels.delta.chunk import chunk_gated_delta_rule

    return chunk_gated_delta_rule(q, x, v, g, beta, scale, timing, S0, chunk_size=chunk_size)


def _recurrent(q, x, v, g, beta, scale, timing, S0, chunk_size):
    return recurrent_gated_delta_rule(q, x, v, g, beta, scale, timing, S0)


DELTA_BACKENDS: dict[str, Backend] = {"recurrent": _recurrent, "chunk": _chunk}


@autocast_off
def gated_delta_rule(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor | None, beta: Tensor, *, scale: float = 1.0,
    alignment: str = "same_time", timing: str = "raw", backend: str = "chunk", chunk_size: int = 64,
    initial_state: FastWeightState | Tensor | None = None, output_final_state: bool = False,
) -> tuple[Tensor, FastWeightState | None]:
    """The gated delta rule ``S_t = exp(g_t)(I − β_t x_t x_tᵀ) S_{t−1} + β_t x_t v_tᵀ`` over a sequence.

    DeltaNet is ``g = 0``; Gated DeltaNet passes its log forget gate ``g ≤ 0``.

    Args:
        q, k: ``[B, T, H, Dk]`` queries and keys (featurised and normalised by the layer). v: ``[B, T, H, Dv]``.
        g: ``[B, T, H]`` log decay, ≤ 0, or None for none (DeltaNet). beta: ``[B, T, H]`` the writing strength β_t.
        scale: the read is ``o_t = scale · Sᵀ q_t``.
        alignment: ``"same_time"`` (x_t = k_t) or ``"shifted"`` (x_t = k_{t−1}; on a fresh sequence x_1 = 0,
            so the first token writes nothing; its decay exp(g_1) still applies to the initial S).
        timing: ``"raw"`` (read S_t) or ``"rbw"`` (read S_{t−1}).
        backend: ``"recurrent"`` (the loop, the oracle) or ``"chunk"`` (chunk-parallel WY form). DeltaNet on
            fused kernels is falcon-1's op with η = β and no ridge (``falcon_lab.mixers.deltanet``).
        chunk_size: C of the chunk form; any T works (the last chunk may be short).
        initial_state: a ``FastWeightState`` to continue from (S and the last key), a bare S (a fresh
            sequence starting from S), or None (a fresh sequence from S = 0).
        output_final_state: return the state for exact continuation.

    Returns:
        o ``[B, T, H, Dv]`` in q's dtype, and the final ``FastWeightState`` (or None). The state is fp32
        (float64 for float64 inputs).
    """
    check_sequence_options(alignment=alignment, timing=timing, backend=backend, backends=tuple(DELTA_BACKENDS),
                           chunk_size=chunk_size)
    check_real("scale", scale)
    B, T, H, _, _ = check_qkv(q, k, v)
    if g is not None:
        check_shape("g", g, (B, T, H), "[B, T, H]")
    check_shape("beta", beta, (B, T, H), "[B, T, H]")
    check_floating_on_one_device(q=q, k=k, v=v, beta=beta, **({} if g is None else {"g": g}))
    out_dtype = q.dtype
    dtype = compute_dtype(q.dtype)
    state, fresh = start_state(q, v, initial_state, dtype)
    q, k, v, beta = (t.to(dtype) for t in (q, k, v, beta))
    g = torch.zeros_like(beta) if g is None else g.to(dtype)
    if alignment == "shifted":
        first = torch.zeros_like(state.last_key) if fresh else state.last_key
        x = torch.cat([first[:, None], k[:, :-1]], dim=1)
    else:
        x = k
    o, S = DELTA_BACKENDS[backend](q, x, v, g, beta, float(scale), timing, state.S, chunk_size)
    final = state._replace(S=S, last_key=k[:, -1]) if output_final_state else None
    return o.to(out_dtype), final
