"""``backend="triton"`` for the regression rules falcon-1 and falcon-2: an autograd op over the chunk kernels.

The kernels take q, k, v, β, λ in their own dtype (bf16, fp16 or fp32) and fuse the pairing, η, γ and
the chunk-local decay prefixes; states and the solve stay fp32. falcon-1 runs the UT transform per chunk of
``chunk_size`` tokens (``triton_f1*.py``); falcon-2 runs one batched per-channel solve sharing
the chunk Gram per block of 16 tokens (``triton_f2*.py``). The backward takes the forward's
chunk quantities (UT transform, pseudo-values, chunk entry states) from the forward when
``KEEP_FOR_BACKWARD`` (default), or recomputes them (less memory, more time).
"""

from __future__ import annotations

import torch
from torch import Tensor

from falcon_lab.kernels.common import packed
from falcon_lab.kernels.common.config import RuleConfig
from falcon_lab.kernels.common.state import FastWeightState
from falcon_lab.kernels.regression import triton_launch as launch
from falcon_lab.kernels.regression.triton_launch import (F2_CHUNK, LAUNCH_OVERRIDES, MATMUL_PRECISION, SOLVE_PRECISION, Layout,
                                              f1_backward, f1_forward, f2_backward, f2_forward)

__all__ = ["LAUNCH_OVERRIDES", "MATMUL_PRECISION", "SOLVE_PRECISION", "triton_regression"]


class RegressionRule(torch.autograd.Function):
    """(q, k, v, β, λ, S0, last key) -> (o, final S), with the chunked backward in Triton."""

    @staticmethod
    def forward(ctx, q, k, v, beta, lam, S0, lk, cfg, fresh, C, cu_seqlens, sample_id=None):
        lay = Layout(q, cu_seqlens, F2_CHUNK if cfg.per_channel else C, sample_id)
        run = f2_forward if cfg.per_channel else f1_forward
        keep = launch.KEEP_FOR_BACKWARD and any(ctx.needs_input_grad[:7])
        o, Sf, kept = run(q, k, v, beta, lam, S0, lk, cfg, fresh, lay, keep=keep)
        ctx.save_for_backward(q, k, v, beta, lam, S0, lk, *kept)
        ctx.cfg, ctx.fresh, ctx.lay = cfg, fresh, lay
        return o, Sf

    @staticmethod
    def backward(ctx, do, dSf):
        q, k, v, beta, lam, S0, lk, *kept = ctx.saved_tensors
        run = f2_backward if ctx.cfg.per_channel else f1_backward
        grads = run(q, k, v, beta, lam, S0, lk, do.contiguous(), None if dSf is None else dSf.contiguous(),
                    ctx.cfg, ctx.fresh, ctx.lay, kept=tuple(kept))
        return (*grads, None, None, None, None, None)


def triton_regression(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, cfg: RuleConfig,
                      state: FastWeightState, fresh: bool, chunk_size: int = 64, cu_seqlens: Tensor | None = None,
                      sample_id: Tensor | None = None) -> tuple[Tensor, FastWeightState]:
    """falcon-1/2 over whole sequences (or packed ones, ``cu_seqlens``; or rows of samples told
    apart by ``sample_id [B, T]`` int32, each row's first sample from its row of the state, the final state each
    row's after its last token); o in q's dtype, the state in fp32. The op has checked that the kernels take the
    inputs (``falcon_lab.kernels.common.checks.fused_refusal``, ``check_sample_id``)."""
    q, k, v, beta, lam = (t.contiguous() for t in (q, k, v, beta, lam))
    S0 = state.S.float().contiguous()
    lk = state.last_key.float().contiguous()
    if sample_id is not None:
        sample_id = packed.ids_int32(sample_id, q.device)
    o, S = RegressionRule.apply(q, k, v, beta, lam, S0, lk, cfg, fresh, chunk_size, cu_seqlens, sample_id)
    last = k[:, -1] if cu_seqlens is None else k[0, cu_seqlens[1:].long() - 1]
    final = FastWeightState(S=S, last_key=last.float(), x_tail=state.x_tail, v_tail=state.v_tail,
                            tail_mask=state.tail_mask)
    return o, final
