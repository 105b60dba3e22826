"""The six Falcon rules, each declared once: its traits and its forms (``falcon_lab.kernels.common.spec``).

Adding a rule is one more ``register_rule(RuleSpec(...))``, here or anywhere (a plugin, a test): the op, the
mixer registry, the benchmarks and the tables iterate over the registry.

The fused forms are reached through the small functions below, which import their kernels on first call:
importing ``falcon_lab.kernels`` builds no Triton kernel.
"""

from __future__ import annotations

from torch import Tensor

from falcon_lab.kernels.common.config import FUSED_MAX_WINDOW, FUSED_MIN_DECAY_FLOOR_PER_CHANNEL, RuleConfig
from falcon_lab.kernels.common.spec import RuleSpec, register_rule
from falcon_lab.kernels.common.state import FastWeightState
from falcon_lab.kernels.inner_product.chunk import chunk_inner_product
from falcon_lab.kernels.inner_product.masked import masked_inner_product
from falcon_lab.kernels.inner_product.naive import recurrent_inner_product
from falcon_lab.kernels.regression.chunk import chunk_regression
from falcon_lab.kernels.regression.masked import masked_regression
from falcon_lab.kernels.regression.naive import recurrent_regression
from falcon_lab.kernels.window.chunk import chunk_falcon3
from falcon_lab.kernels.window.masked import masked_falcon3
from falcon_lab.kernels.window.naive import recurrent_window


def triton_regression(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, cfg: RuleConfig,
                      state: FastWeightState, fresh: bool, chunk_size: int = 64, cu_seqlens: Tensor | None = None,
                      sample_id: Tensor | None = None) -> tuple[Tensor, FastWeightState]:
    """falcon-1/2's fused kernels (``falcon_lab.kernels.regression.fused``), also over rows of samples
    (``sample_id``)."""
    from falcon_lab.kernels.regression.fused import triton_regression as fused

    return fused(q, k, v, beta, lam, cfg, state, fresh, chunk_size=chunk_size, cu_seqlens=cu_seqlens,
                 sample_id=sample_id)


def triton_inner_product(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, cfg: RuleConfig,
                         state: FastWeightState, fresh: bool, chunk_size: int = 64, cu_seqlens: Tensor | None = None,
                         sample_id: Tensor | None = None) -> tuple[Tensor, FastWeightState]:
    """falcon-1a/2a's fused kernels (``falcon_lab.kernels.inner_product.fused``); falcon-1a's take rows of samples
    by ``sample_id``."""
    from falcon_lab.kernels.inner_product.fused import triton_inner_product as fused

    return fused(q, k, v, beta, lam, cfg, state, fresh, chunk_size=chunk_size, cu_seqlens=cu_seqlens,
                 sample_id=sample_id)


def triton_falcon3(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, cfg: RuleConfig,
                   state: FastWeightState, fresh: bool, chunk_size: int = 64,
                   cu_seqlens: Tensor | None = None,
                   sample_id: Tensor | None = None) -> tuple[Tensor, FastWeightState]:
    """falcon-3's fused kernels (``falcon_lab.kernels.window.fused``); also over rows of fresh samples by
    ``sample_id``."""
    from falcon_lab.kernels.window.fused import triton_falcon3 as fused

    return fused(q, k, v, beta, lam, cfg, state, fresh, chunk_size=chunk_size, cu_seqlens=cu_seqlens,
                 sample_id=sample_id)


def triton_falcon3a(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, cfg: RuleConfig,
                    state: FastWeightState, fresh: bool, chunk_size: int = 64, cu_seqlens: Tensor | None = None,
                    sample_id: Tensor | None = None) -> tuple[Tensor, FastWeightState]:
    """falcon-3a's fused form: one delayed decayed linear attention on falcon-1a's kernels and a band
    (``falcon_lab.kernels.window.fused``); also over rows of fresh samples by ``sample_id``."""
    from falcon_lab.kernels.window.fused import triton_falcon3a as fused

    return fused(q, k, v, beta, lam, cfg, state, fresh, chunk_size=chunk_size, cu_seqlens=cu_seqlens,
                 sample_id=sample_id)


def triton_falcon3a_packed(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, cfg: RuleConfig,
                           chunk_size: int, cu_seqlens: Tensor | None = None) -> Tensor:
    """falcon-3a over fresh sequences, outputs alone: rows, or packed sequences with no padding
    (``falcon_lab.kernels.window.fused``)."""
    from falcon_lab.kernels.window.fused import triton_falcon3a_packed as fused

    return fused(q, k, v, beta, lam, cfg, chunk_size, cu_seqlens)


def decayed_attention(q: Tensor, k: Tensor, v: Tensor, eta: Tensor, log_gamma: Tensor, S0: Tensor, raw: bool = True,
                      chunk_size: int = 64, cu_seqlens: Tensor | None = None,
                      sample_id: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Decayed linear attention ``S_t = γ_t S_{t−1} + η_t x_t v_tᵀ`` on falcon-1a's fused kernels, its gates given as
    they are (``falcon_lab.kernels.inner_product.fused.decayed_attention``): the op RetNet and Mamba-2 share with
    falcon-1a. Packed sequences by ``cu_seqlens``, or the samples of each row by ``sample_id [B, T]``. Returns
    (o in q's dtype, the final S)."""
    from falcon_lab.kernels.inner_product.fused import decayed_attention as fused

    return fused(q, k, v, eta, log_gamma, S0, raw=raw, chunk_size=chunk_size, cu_seqlens=cu_seqlens,
                 sample_id=sample_id)


FALCON_1 = register_rule(RuleSpec(
    "falcon-1", "regression", regression=True, per_channel=False, windowed=False, gain_bound="ridge",
    recurrent=recurrent_regression, masked=masked_regression, chunk=chunk_regression, triton=triton_regression,
    by_sample_id=True, summary="NLMS on the newest pair: one gain per head"))
FALCON_2 = register_rule(RuleSpec(
    "falcon-2", "regression", regression=True, per_channel=True, windowed=False, gain_bound="ridge",
    recurrent=recurrent_regression, masked=masked_regression, chunk=chunk_regression, triton=triton_regression,
    by_sample_id=True, summary="NLMS on the newest pair: one gain per value channel"))
FALCON_3 = register_rule(RuleSpec(
    "falcon-3", "window", regression=True, per_channel=False, windowed=True, gain_bound="ridge",
    recurrent=recurrent_window, masked=masked_falcon3, chunk=chunk_falcon3, triton=triton_falcon3,
    fused_max_window=FUSED_MAX_WINDOW, chunk_by_window=True, by_sample_id=True,
    summary="one step on the mean loss of the last B pairs"))
FALCON_1A = register_rule(RuleSpec(
    "falcon-1a", "inner_product", regression=False, per_channel=False, windowed=False, gain_bound="energy",
    recurrent=recurrent_inner_product, masked=masked_inner_product, chunk=chunk_inner_product,
    triton=triton_inner_product, by_sample_id=True, summary="decayed linear attention with a data-dependent step"))
FALCON_2A = register_rule(RuleSpec(
    "falcon-2a", "inner_product", regression=False, per_channel=True, windowed=False, gain_bound="energy",
    recurrent=recurrent_inner_product, masked=masked_inner_product, chunk=chunk_inner_product,
    triton=triton_inner_product, fused_min_decay_floor=FUSED_MIN_DECAY_FLOOR_PER_CHANNEL,
    summary="falcon-1a with one gain and one carry per value channel"))
# falcon-3a's parallel forms are the inner-product ones with a window of pairs; its fused form is one falcon-1a pass
# over the pairs delayed by W − 1 and a band of the pairs still inside the window
FALCON_3A = register_rule(RuleSpec(
    "falcon-3a", "window", regression=False, per_channel=False, windowed=True, gain_bound="energy",
    recurrent=recurrent_window, masked=masked_inner_product, chunk=chunk_inner_product, triton=triton_falcon3a,
    triton_packed=triton_falcon3a_packed, by_sample_id=True, summary="falcon-1a on the mean of the last B pairs"))
