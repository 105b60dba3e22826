"""How a backend is called: the form of (rule, backend) is the rule's spec's own function (``RuleSpec.form``:
``falcon_lab.kernels.falcon.rules`` declares the six rules with their forms imported). Every form takes
``(q, k, v, beta, lam, cfg, state, fresh)`` in the compute dtype (the fused forms in the inputs' own dtype);
``chunk`` forms also take ``chunk_size``, ``triton`` forms ``chunk_size`` and ``cu_seqlens`` (and ``sample_id``, those
of a rule whose spec says ``by_sample_id``).
"""

from __future__ import annotations

from typing import Callable

from torch import Tensor

from falcon_lab.kernels.common import grid, packed
from falcon_lab.kernels.common.checks import fused_refusal
from falcon_lab.kernels.common.config import RuleConfig
from falcon_lab.kernels.common.spec import rule_spec
from falcon_lab.kernels.common.state import FastWeightState

Form = Callable[..., tuple[Tensor, FastWeightState]]


def form(rule: str, backend: str) -> Form:
    """The function that runs ``rule`` on ``backend`` (ValueError for a pair the rule's spec lacks)."""
    return rule_spec(rule).form(backend)


def run(backend: str, q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, cfg: RuleConfig,
        state: FastWeightState, fresh: bool, chunk_size: int, cu_seqlens: Tensor | None = None,
        sample_id: Tensor | None = None) -> tuple[Tensor, FastWeightState]:
    """Run the form of (cfg.rule, backend) with what its backend takes."""
    fn = cfg.spec.form(backend)
    if backend == "triton":
        return _fused(fn, q, k, v, beta, lam, cfg, state, fresh, chunk_size, cu_seqlens, sample_id)
    if backend == "chunk":
        return fn(q, k, v, beta, lam, cfg, state, fresh, chunk_size=chunk_size)
    return fn(q, k, v, beta, lam, cfg, state, fresh)


def auto_backend(q: Tensor, v: Tensor, cfg: RuleConfig, chunk_size: int, packed: bool = False) -> str:
    """``backend="auto"``: the fused kernels where they apply (CUDA, half or single precision, a rule they
    cover, Dk and Dv ≤ 256, a chunk size they take, falcon-3's window up to 64), else the PyTorch chunk form."""
    if not cfg.spec.auto:
        return "chunk"
    return "triton" if q.is_cuda and fused_refusal(q, v, cfg, chunk_size, packed) is None else "chunk"


def _fused(fn: Form, q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, cfg: RuleConfig,
           state: FastWeightState, fresh: bool, chunk_size: int, cu_seqlens: Tensor | None,
           sample_id: Tensor | None = None) -> tuple[Tensor, FastWeightState]:
    """A fused form within CUDA's launch limits (``falcon_lab.kernels.common.grid``): a batch or a set of packed sequences
    past them runs in slices, outputs and final states joined."""
    B, T, H = q.shape[0], q.shape[1], q.shape[2]
    if sample_id is not None:  # rows of samples: a slice of rows takes its rows' ids
        groups = grid.row_groups(B, T, H, chunk_size)
        if len(groups) > 1:
            return grid.joined([fn(*(t[i:j] for t in (q, k, v, beta, lam)), cfg,
                                   FastWeightState(*(s[i:j] for s in state)), fresh, chunk_size=chunk_size,
                                   sample_id=sample_id[i:j]) for i, j in groups], dim=0)
        return fn(q, k, v, beta, lam, cfg, state, fresh, chunk_size=chunk_size, sample_id=sample_id)
    if cu_seqlens is None:
        groups = grid.row_groups(B, T, H, chunk_size)
        if len(groups) > 1:
            return grid.joined([fn(*(t[i:j] for t in (q, k, v, beta, lam)), cfg,
                                   FastWeightState(*(s[i:j] for s in state)), fresh, chunk_size=chunk_size)
                                for i, j in groups], dim=0)
    else:
        groups = grid.sequence_groups(cu_seqlens, H, chunk_size)
        if len(groups) > 1:
            bounds = packed.offsets(cu_seqlens)
            parts = []
            for i, j in groups:
                b, e = bounds[i], bounds[j]
                parts.append(fn(*(t[:, b:e] for t in (q, k, v, beta, lam)), cfg,
                                FastWeightState(*(s[i:j] for s in state)), fresh, chunk_size=chunk_size,
                                cu_seqlens=cu_seqlens[i:j + 1] - cu_seqlens[i]))
            return grid.joined(parts, dim=1)
    return fn(q, k, v, beta, lam, cfg, state, fresh, chunk_size=chunk_size, cu_seqlens=cu_seqlens)
