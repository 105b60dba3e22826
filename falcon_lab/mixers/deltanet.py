"""The DeltaNet (Yang et al., 2024) and Gated DeltaNet (Yang, Kautz & Hatamizadeh, 2025) baselines via
``kernels.gated_delta_rule``.

    q, k, v = SiLU(short conv(W_q h)), ... (plain projections without the conv);  q, k ℓ2-normalised per head
    β_t = σ(W_β h)  (per head)
    DeltaNet:        S_t = (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ                    (g = 0)
    Gated DeltaNet:  S_t = exp(g_t)(I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ,
                     g_t = −exp(A_log) · softplus(W_a h + dt_bias)                      (per head)
    o_t = S_tᵀ q_t / sqrt(Dk), then per-head RMSNorm (learnable gain), times SiLU(W_g h) when ``output_gate``
    (Gated DeltaNet's default; DeltaNet's is off), then the output projection.

Gated DeltaNet initialises A uniform in [A_init_min, A_init_max] = [0, 16] and Δ = softplus(dt_bias)
log-uniform in [dt_min, dt_max] (as Mamba-2), and widens values by ``expand_v`` = 2 (its default);
DeltaNet keeps ``expand_v`` = 1.

Isolated samples reach the fused kernels, with ``layers.SAMPLE_IDS`` (the default), as the rows they are, told apart
by each token's sample id (``sample_id=``): full chunks, shapes of the batch's alone and no host read; with
``LAB_SAMPLE_IDS=0`` in the environment as packed sequences (``cu_seqlens``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from falcon_lab.kernels import fast_weight_rule, gated_delta_refusal, gated_delta_rule, gated_delta_triton, rule_spec
from falcon_lab.kernels.common import packed
from falcon_lab.kernels.delta import DELTA_BACKENDS
from falcon_lab.mixers import layers
from falcon_lab.mixers.layers import (Mixer, RMSNorm, SampleRows, ShortConv, chunk_for, dt_bias_init, full_precision,
                           l2_norm, packed_chunk, residual_out, sample_bounds, short_conv_step)
from falcon_lab.mixers.options import check_bool, check_int, check_kernel_choices, check_range, head_dim_of

# DeltaNet's recurrence S_t = (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ is falcon-1's S_{t−1} + η_t k_t (v_t −
# S_{t−1}ᵀ k_t)ᵀ with η = β and no ridge (carry 1): on these backends DeltaNet runs falcon-1's op, "triton" its
# fused kernels, "auto" those on a GPU where they take the inputs (else the WY chunk form); the gated rule runs
# the same kernels with its decay inside the residual (falcon_lab/kernels/regression/gated_delta.py)
FUSED_BACKENDS = ("triton", "auto")
RULE = rule_spec("falcon-1")  # the Falcon rule whose op DeltaNet runs (and whose kernels Gated DeltaNet shares)


@dataclass
class DeltaNetOptions:
    """head_dim: key width per head (default d_model / n_heads); expand_v: value width / key width;
    beta_max: β = beta_max·σ(w·x), so the transition I − β k kᵀ has eigenvalue 1 − β along k in (1 − beta_max, 1):
    1 (default, DeltaNet's β ∈ (0, 1)) or up to 2, where it can be negative (Grazzi et al., 2024). backend:
    ``auto`` (default: falcon-1's fused kernels on a GPU, the WY chunk form elsewhere), ``triton``, ``chunk`` or
    ``recurrent``."""

    head_dim: int | None = None
    expand_v: int = 1
    conv: bool = True
    conv_size: int = 4
    output_gate: bool = False
    alignment: str = "same_time"
    timing: str = "raw"
    backend: str = "auto"
    chunk_size: int = 64
    norm_eps: float = 1e-5
    beta_max: float = 1.0

    def check(self, mixer: str) -> None:
        for name in ("expand_v", "conv_size", "chunk_size"):
            check_int(mixer, name, getattr(self, name), 1)
        for name in ("conv", "output_gate"):
            check_bool(mixer, name, getattr(self, name))
        check_kernel_choices(mixer, self.alignment, self.timing, self.backend, (*DELTA_BACKENDS, *FUSED_BACKENDS))
        check_range(mixer, "norm_eps", self.norm_eps, 0.0, float("inf"), low_open=True)
        check_range(mixer, "beta_max", self.beta_max, 0.0, 2.0, low_open=True)


@dataclass
class GatedDeltaNetOptions(DeltaNetOptions):
    """DeltaNet's options plus the forget gate's initialisation."""

    expand_v: int = 2
    output_gate: bool = True
    dt_min: float = 1e-3
    dt_max: float = 1e-1
    dt_init_floor: float = 1e-4
    A_init_min: float = 0.0
    A_init_max: float = 16.0

    def check(self, mixer: str) -> None:
        super().check(mixer)
        check_range(mixer, "dt_min", self.dt_min, 0.0, float("inf"), low_open=True)
        check_range(mixer, "dt_max", self.dt_max, self.dt_min, float("inf"))
        check_range(mixer, "dt_init_floor", self.dt_init_floor, 0.0, float("inf"), low_open=True)
        check_range(mixer, "A_init_min", self.A_init_min, 0.0, float("inf"))
        check_range(mixer, "A_init_max", self.A_init_max, self.A_init_min, float("inf"), low_open=True)


class DeltaNet(Mixer):
    """DeltaNet, or Gated DeltaNet when ``opts`` is a ``GatedDeltaNetOptions``; see the module docstring.

    ``forward(x, samples)`` with ``samples [B, L]`` (isolated samples: the sample of its row each token belongs
    to) restarts the state and the short convolutions at every sample, the projections run on the packed rows:
    the samples go to the rule as packed sequences (``cu_seqlens``) on the fused kernels and to DeltaNet's
    falcon-1 chunk form; Gated DeltaNet's WY chunk form, which takes no packed sequences, gets them one to a row."""

    resets_at_samples = True
    spec = RULE

    def __init__(self, d_model: int, n_heads: int, opts: DeltaNetOptions, name: str = "deltanet") -> None:
        super().__init__()
        self.opts, self.n_heads = opts, n_heads
        self.gated = isinstance(opts, GatedDeltaNetOptions)
        self.dk = head_dim_of(name, d_model, n_heads, opts.head_dim)
        self.dv = self.dk * opts.expand_v
        self.q_proj = nn.Linear(d_model, n_heads * self.dk, bias=False)
        self.k_proj = nn.Linear(d_model, n_heads * self.dk, bias=False)
        self.v_proj = nn.Linear(d_model, n_heads * self.dv, bias=False)
        widths = (n_heads * self.dk, n_heads * self.dk, n_heads * self.dv)
        self.convs = nn.ModuleList(ShortConv(w, opts.conv_size) for w in widths) if opts.conv else None
        self.b_proj = nn.Linear(d_model, n_heads, bias=False)
        if self.gated:
            self.a_proj = nn.Linear(d_model, n_heads, bias=False)
            A = torch.empty(n_heads).uniform_(opts.A_init_min, opts.A_init_max).clamp(min=1e-6)  # log A finite
            self.A_log = nn.Parameter(torch.log(A))
            self.dt_bias = nn.Parameter(dt_bias_init(n_heads, opts.dt_min, opts.dt_max, opts.dt_init_floor))
        self.o_norm = RMSNorm(self.dv, opts.norm_eps)
        self.g_proj = nn.Linear(d_model, n_heads * self.dv, bias=False) if opts.output_gate else None
        self.o_proj = residual_out(nn.Linear(n_heads * self.dv, d_model, bias=False))

    def _features(self, x: Tensor, q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor | None, ...]:
        """Per-head ℓ2-normalised q, k, v ``[..., H, D]``, β and log gate g ``[..., H]`` (None for DeltaNet) from
        x ``[..., d]``."""
        eps = 1e-6
        q = l2_norm(q.unflatten(-1, (self.n_heads, self.dk)), eps)
        k = l2_norm(k.unflatten(-1, (self.n_heads, self.dk)), eps)
        v = v.unflatten(-1, (self.n_heads, self.dv))
        dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
        beta = self.opts.beta_max * torch.sigmoid(self.b_proj(x).to(dtype))
        if self.gated:
            g = -torch.exp(self.A_log.to(dtype)) * F.softplus(self.a_proj(x).to(dtype) + self.dt_bias.to(dtype))
        else:
            g = None
        return q, k, v, g, beta

    def _output(self, o: Tensor, x: Tensor) -> Tensor:
        o = self.o_norm(o)
        if self.g_proj is not None:
            o = o * F.silu(self.g_proj(x)).unflatten(-1, (self.n_heads, self.dv))
        return self.o_proj(o.flatten(-2))

    @torch.compiler.disable  # the WY chunk form and the fused kernels stay outside torch.compile's graph
    def _rule(self, q, k, v, g, beta, backend: str, state=None, samples: Tensor | None = None):
        scale = 1.0 / math.sqrt(self.dk)
        fused = backend == "triton" or (backend == "auto" and q.is_cuda and q.dtype != torch.float64)
        if g is not None and backend == "auto" and fused:  # auto takes the kernels where they take the inputs
            fused = gated_delta_refusal(q, v, beta, self.opts.chunk_size) is None
        if fused and g is not None:  # the gated rule on falcon-1's kernels, the inputs in their own dtype
            opts = dict(scale=scale, alignment=self.opts.alignment, timing=self.opts.timing,
                        chunk_size=self.opts.chunk_size)
            with full_precision(q):
                if samples is not None and layers.SAMPLE_IDS:  # the rows as they are, their samples told apart by id
                    return gated_delta_triton(q, k, v, g, beta, sample_id=samples, **opts)
                if samples is not None:  # every sample of every row one packed sequence of a batch of one
                    bounds = sample_bounds(samples)
                    opts["chunk_size"] = (packed_chunk(bounds, self.opts.chunk_size) if q.is_cuda
                                          else chunk_for(packed.longest(bounds), self.opts.chunk_size))
                    q, k, v, g, beta = (t.flatten(0, 1)[None] for t in (q, k, v, g, beta))
                    o, _ = gated_delta_triton(q, k, v, g, beta, cu_seqlens=bounds, **opts)
                    return o[0].unflatten(0, samples.shape), None
                return gated_delta_triton(q, k, v, g, beta, initial_state=state, output_final_state=state is not None,
                                          **opts)
        if samples is not None and g is not None:  # the gated rule over the samples laid one to a row
            rows = SampleRows(samples)
            with full_precision(q):
                o, _ = gated_delta_rule(*(rows.apart(t) for t in (q, k, v, g, beta)), scale=scale,
                                        alignment=self.opts.alignment, timing=self.opts.timing,
                                        backend="chunk" if backend == "auto" else backend,
                                        chunk_size=rows.chunk(self.opts.chunk_size))
            return rows.back(o), None
        with full_precision(q):
            if samples is not None and fused and layers.SAMPLE_IDS:  # the rows as they are, samples told apart by id
                return fast_weight_rule(q * scale, k, v, eta=beta, lam=torch.zeros_like(beta), rule=RULE.name,
                                        alignment=self.opts.alignment, timing=self.opts.timing, backend=backend,
                                        chunk_size=self.opts.chunk_size, sample_id=samples)
            if samples is not None:  # every sample of every row one packed sequence of a batch of one
                bounds = sample_bounds(samples)
                chunk = packed_chunk(bounds, self.opts.chunk_size) if q.is_cuda else self.opts.chunk_size
                q, k, v, beta = (t.flatten(0, 1)[None] for t in (q, k, v, beta))
                o, _ = fast_weight_rule(q * scale, k, v, eta=beta, lam=torch.zeros_like(beta), rule=RULE.name,
                                        alignment=self.opts.alignment, timing=self.opts.timing,
                                        backend=backend if fused else "chunk", chunk_size=chunk,
                                        cu_seqlens=bounds)
                return o[0].unflatten(0, samples.shape), None
            if fused:  # falcon-1's op, the inputs in their own dtype as the Falcon mixers give them
                return fast_weight_rule(q * scale, k, v, eta=beta, lam=torch.zeros_like(beta), rule=RULE.name,
                                        alignment=self.opts.alignment, timing=self.opts.timing, backend=backend,
                                        chunk_size=self.opts.chunk_size, initial_state=state,
                                        output_final_state=state is not None)
            return gated_delta_rule(q, k, v, g, beta, scale=scale, alignment=self.opts.alignment,
                                    timing=self.opts.timing, backend="chunk" if backend == "auto" else backend,
                                    chunk_size=self.opts.chunk_size, initial_state=state,
                                    output_final_state=state is not None)

    def forward(self, x: Tensor, samples: Tensor | None = None) -> Tensor:
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if self.convs is not None:
            q, k, v = (conv(t, samples) for conv, t in zip(self.convs, (q, k, v)))
        o, _ = self._rule(*self._features(x, q, k, v), self.opts.backend, samples=samples)
        return self._output(o, x)

    def init_cache(self, batch: int, device: torch.device | str, dtype: torch.dtype) -> dict:
        """The conv windows (if any) and the state (a bare zero S: a fresh sequence)."""
        convs = None if self.convs is None else [c.init_cache(batch, device, dtype) for c in self.convs]
        state_dtype = torch.float64 if dtype == torch.float64 else torch.float32
        S = torch.zeros(batch, self.n_heads, self.dk, self.dv, device=device, dtype=state_dtype)
        return {"conv": convs, "state": S}

    def step(self, x_t: Tensor, cache: dict) -> tuple[Tensor, dict]:
        q, k, v = self.q_proj(x_t), self.k_proj(x_t), self.v_proj(x_t)
        (q, k, v), convs = short_conv_step(self.convs, (q, k, v), cache["conv"])
        feats = (None if t is None else t[:, None] for t in self._features(x_t, q, k, v))
        o, state = self._rule(*feats, "recurrent", cache["state"])
        return self._output(o[:, 0], x_t), {"conv": convs, "state": state}
