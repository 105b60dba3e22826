"""The one dispatch table of the Falcon rules: which function runs each (rule, backend), and how a backend is
called. Every form takes ``(q, k, v, beta, lam, cfg, state, fresh)`` in the compute dtype (the fused forms in the
inputs' own dtype); ``chunk`` forms also take ``chunk_size``, ``triton`` forms ``chunk_size`` and ``cu_seqlens``.

The forms are imported on first use: importing ``kernels`` compiles and imports no Triton code.
"""

from __future__ import annotations

import importlib
from typing import Callable

from torch import Tensor

from falcon_lab.kernels.common import grid, packed
from falcon_lab.kernels.common.checks import fused_refusal
from falcon_lab.kernels.common.config import RuleConfig
from falcon_lab.kernels.common.state import FastWeightState

Form = Callable[..., tuple[Tensor, FastWeightState]]

FORMS: dict[tuple[str, str], str] = {
    ("falcon-1", "recurrent"): "falcon_lab.kernels.regression.naive.recurrent_regression",
    ("falcon-1", "masked"): "falcon_lab.kernels.regression.masked.masked_regression",
    ("falcon-1", "chunk"): "falcon_lab.kernels.regression.chunk.chunk_regression",
    ("falcon-1", "triton"): "falcon_lab.kernels.regression.fused.triton_regression",
    ("falcon-2", "recurrent"): "falcon_lab.kernels.regression.naive.recurrent_regression",
    ("falcon-2", "masked"): "falcon_lab.kernels.regression.masked.masked_regression",
    ("falcon-2", "chunk"): "falcon_lab.kernels.regression.chunk.chunk_regression",
    ("falcon-2", "triton"): "falcon_lab.kernels.regression.fused.triton_regression",
    ("falcon-1a", "recurrent"): "falcon_lab.kernels.inner_product.naive.recurrent_inner_product",
    ("falcon-1a", "masked"): "falcon_lab.kernels.inner_product.masked.masked_inner_product",
    ("falcon-1a", "chunk"): "falcon_lab.kernels.inner_product.chunk.chunk_inner_product",
    ("falcon-1a", "triton"): "falcon_lab.kernels.inner_product.fused.triton_inner_product",
    ("falcon-2a", "recurrent"): "falcon_lab.kernels.inner_product.naive.recurrent_inner_product",
    ("falcon-2a", "masked"): "falcon_lab.kernels.inner_product.masked.masked_inner_product",
    ("falcon-2a", "chunk"): "falcon_lab.kernels.inner_product.chunk.chunk_inner_product",
    ("falcon-2a", "triton"): "falcon_lab.kernels.inner_product.fused.triton_inner_product",
    ("falcon-3", "recurrent"): "falcon_lab.kernels.window.naive.recurrent_window",
    ("falcon-3", "masked"): "falcon_lab.kernels.window.masked.masked_falcon3",
    ("falcon-3", "chunk"): "falcon_lab.kernels.window.chunk.chunk_falcon3",
    ("falcon-3", "triton"): "falcon_lab.kernels.window.fused.triton_falcon3",
    ("falcon-3a", "recurrent"): "falcon_lab.kernels.window.naive.recurrent_window",
    # falcon-3a's parallel forms are the inner-product ones with a window of pairs; its fused form runs W
    # falcon-1a recurrences, one per lag of the window
    ("falcon-3a", "masked"): "falcon_lab.kernels.inner_product.masked.masked_inner_product",
    ("falcon-3a", "chunk"): "falcon_lab.kernels.inner_product.chunk.chunk_inner_product",
    ("falcon-3a", "triton"): "falcon_lab.kernels.window.fused.triton_falcon3a",
}
# fused forms backend="auto" does not take yet (none: falcon-3's kernels, held back until their tests passed on a GPU,
# passed all 22 on an H200 at commit b848a3e, records/bench/kernels-2026-12-03)
NOT_AUTO: tuple[str, ...] = ()


def form(rule: str, backend: str) -> Form:
    """The function that runs ``rule`` on ``backend`` (ValueError for a pair the table lacks)."""
    if (rule, backend) not in FORMS:
        covered = ", ".join(r for r, b in FORMS if b == backend)
        raise ValueError(f"backend={backend!r} covers {covered}; for {rule} use backend='chunk'")
    module, name = FORMS[rule, backend].rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


def run(backend: str, q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, cfg: RuleConfig,
        state: FastWeightState, fresh: bool, chunk_size: int,
        cu_seqlens: Tensor | None = None) -> tuple[Tensor, FastWeightState]:
    """Run the form of (cfg.rule, backend) with what its backend takes."""
    fn = form(cfg.rule, backend)
    if backend == "triton":
        return _fused(fn, q, k, v, beta, lam, cfg, state, fresh, chunk_size, cu_seqlens)
    if backend == "chunk":
        return fn(q, k, v, beta, lam, cfg, state, fresh, chunk_size=chunk_size)
    return fn(q, k, v, beta, lam, cfg, state, fresh)


def auto_backend(q: Tensor, v: Tensor, cfg: RuleConfig, chunk_size: int, packed: bool = False) -> str:
    """``backend="auto"``: the fused kernels where they apply (CUDA, half or single precision, a rule they
    cover, Dk and Dv ≤ 256, a chunk size they take, falcon-3's window up to 64), else the PyTorch chunk form."""
    if cfg.rule in NOT_AUTO:
        return "chunk"
    return "triton" if q.is_cuda and fused_refusal(q, v, cfg, chunk_size, packed) is None else "chunk"


def _fused(fn: Form, q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, cfg: RuleConfig,
           state: FastWeightState, fresh: bool, chunk_size: int,
           cu_seqlens: Tensor | None) -> tuple[Tensor, FastWeightState]:
    """A fused form within CUDA's launch limits (``falcon_lab.kernels.common.grid``): a batch or a set of packed sequences
    past them runs in slices, outputs and final states joined."""
    B, T, H = q.shape[0], q.shape[1], q.shape[2]
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
