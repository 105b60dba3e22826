"""The gated delta rule on falcon-1's fused kernels: Gated DeltaNet's op on a GPU.

    S_t = γ_t (I − β_t x_t x_tᵀ) S_{t−1} + β_t x_t v_tᵀ = γ_t S_{t−1} + x_t u_tᵀ,   u_t = β_t (v_t − (γ_t S_{t−1})ᵀ x_t)

is falcon-1's recurrence S_t = γ_t S_{t−1} + x_t u_tᵀ with its step η = β and its carry γ = e^g given, save one
factor: the residual reads the state after its decay, γ_t S_{t−1}, where falcon-1's reads S_{t−1}. In the chunk
form that moves one log-prefix (G for Gp in the UT transform and the write); falcon-1's kernels take it as a flag
(``RuleConfig.gated_delta``, ``GATED_DELTA`` in ``triton_f1*.py``), so Gated DeltaNet trains on the kernels DeltaNet
(g = 0, where the two readings agree) already used, packed sequences kept apart included. As with decayed linear
attention on falcon-1a's kernels, the mixer makes the call: the baselines' ops (``kernels.gated_delta_rule``, the
oracle and the WY chunk form) import ``common`` only. Checked against that oracle in ``tests/test_delta_rule.py``.
"""

from __future__ import annotations

from torch import Tensor

from falcon_lab.kernels.common import grid
from falcon_lab.kernels.common.checks import (check_cu_seqlens, check_floating_on_one_device, check_qkv, check_real,
                                   check_sample_id, check_sequence_options, check_shape, fused_refusal, start_state)
from falcon_lab.kernels.common.config import RuleConfig
from falcon_lab.kernels.common.precision import autocast_off, compute_dtype
from falcon_lab.kernels.common.state import FastWeightState


def config(alignment: str, timing: str) -> RuleConfig:
    """The kernels' configuration of the gated delta rule."""
    return RuleConfig(rule="falcon-1", alignment=alignment, timing=timing, normalize=False, gated_delta=True)


def refusal(q: Tensor, v: Tensor, beta: Tensor, chunk_size: int, packed: bool = False) -> str | None:
    """Why the kernels cannot take these inputs, or None (``falcon_lab.kernels.common.checks.fused_refusal``): what
    ``backend="auto"`` asks before it takes them."""
    return fused_refusal(q, v, config("same_time", "raw"), chunk_size, packed, beta, beta)


@autocast_off
def gated_delta_triton(q: Tensor, k: Tensor, v: Tensor, g: Tensor | None, beta: Tensor, *, scale: float = 1.0,
                       alignment: str = "same_time", timing: str = "raw", chunk_size: int = 64,
                       initial_state: FastWeightState | Tensor | None = None, output_final_state: bool = False,
                       cu_seqlens: Tensor | None = None,
                       sample_id: Tensor | None = None) -> tuple[Tensor, FastWeightState | None]:
    """``kernels.gated_delta_rule`` on the fused kernels: the same arguments (g None for DeltaNet), the inputs in
    bf16, fp16 or fp32 (kept in their own dtype; the state float32), chunk_size 16, 32 or 64, CUDA tensors or
    Triton's interpreter, and ``cu_seqlens`` (``[N + 1]`` int offsets of N sequences packed along T of a batch of
    one; each starts fresh, or from row n of ``initial_state``, and the final state has N rows), or in its place
    ``sample_id`` (``[B, T]`` integers non-decreasing along each row: rows of samples told apart by their ids, as
    ``fast_weight_rule`` takes them: no host read, shapes of B and T alone).
    Returns o ``[B, T, H, Dv]`` in q's dtype and the final state (or None)."""
    check_sequence_options(alignment=alignment, timing=timing, backend="triton", backends=("triton",),
                           chunk_size=chunk_size)
    check_real("scale", scale)
    B, T, H, _, _ = check_qkv(q, k, v)
    check_shape("beta", beta, (B, T, H), "[B, T, H]")
    if g is None:
        g = beta.new_zeros(beta.shape)
    check_shape("g", g, (B, T, H), "[B, T, H]")
    check_floating_on_one_device(q=q, k=k, v=v, g=g, beta=beta)
    cfg = config(alignment, timing)
    why = fused_refusal(q, v, cfg, chunk_size, cu_seqlens is not None, beta, g)
    if why:
        raise ValueError(why)
    if sample_id is not None:
        check_sample_id(sample_id, q, cu_seqlens)
    bounds = None if cu_seqlens is None else check_cu_seqlens(cu_seqlens, q)
    state, fresh = start_state(q, v, initial_state, compute_dtype(q.dtype),
                               batch=None if bounds is None else len(bounds) - 1)
    q = q * scale if scale != 1.0 else q
    # Triton on first use only: a CPU install has none (pyproject's triton extra), and DeltaNet's mixer imports this
    from falcon_lab.kernels.regression.fused import triton_regression

    # within CUDA's launch limits: rows or packed sequences in slices that fit (falcon_lab.kernels.common.grid)
    if bounds is None:
        groups = grid.row_groups(B, T, H, chunk_size)
        if len(groups) == 1:
            o, final = triton_regression(q, k, v, beta, g, cfg, state, fresh, chunk_size, sample_id=sample_id)
        else:
            o, final = grid.joined([triton_regression(*(t[i:j] for t in (q, k, v, beta, g)), cfg,
                                                      FastWeightState(*(s[i:j] for s in state)), fresh, chunk_size,
                                                      sample_id=None if sample_id is None else sample_id[i:j])
                                    for i, j in groups], dim=0)
    else:
        groups = grid.sequence_groups(cu_seqlens, H, chunk_size)
        if len(groups) == 1:  # cu_seqlens itself: its host facts are the ones every layer reads (falcon_lab.kernels.common.packed)
            o, final = triton_regression(q, k, v, beta, g, cfg, state, fresh, chunk_size, cu_seqlens)
        else:
            o, final = grid.joined([triton_regression(*(t[:, bounds[i]:bounds[j]] for t in (q, k, v, beta, g)), cfg,
                                                      FastWeightState(*(s[i:j] for s in state)), fresh, chunk_size,
                                                      cu_seqlens[i:j + 1] - cu_seqlens[i])
                                    for i, j in groups], dim=1)
    return o, (final if output_final_state else None)
