"""The Falcon mixer: one layer around ``kernels.fast_weight_rule`` for any of the six rules.

Per token t, from the layer input h_t (paper §4-5, appendix C):

1. q, k, v = W_q h, W_k h, W_v h, each through a short causal depthwise conv + SiLU (``conv``, size 4);
   without the conv they are the plain projections.
2. Per head: QK-norm (``qk_norm``: parameter-free ``rmsnorm`` so ‖x‖² ≤ Dk (default), ``l2`` so ‖x‖² ≤ 1,
   or ``none``); optional parameter-free VNorm on v (``v_norm``).
3. Gates, one per head (one per head and value channel for falcon-2/2a), from learned projections of h plus
   learned per-head offsets (initialised as below):
   - ``ctx_beta``: β_t = beta_max·σ(w·h + b) ∈ (0, beta_max), the NLMS gain; the rule normalises
     η = β/(E + λ + ε). beta_max = 2 (default) is the paper's range, where the transition's eigenvalue 1 − β
     along x can be negative; beta_max = 1 keeps it in [0, 1). Offsets start at 0, so β = beta_max / 2.
   - ``ctx_eta`` (the paper does not define ctxη; this is our reading): the layer emits the step size itself,
     η_t = eta_max·σ(w·h + b) / E_ref, and the rule takes it as its step size (``eta=``, no energy
     normalisation); the carry is still γ = 1 − min(η λ, 1 − ε_γ). E_ref is the write energy the
     QK-norm gives a key: Dk for ``rmsnorm`` (and ``none``, nominally), 1 for ``l2``. Why: with QK-RMSNorm
     ‖x‖² ≤ Dk, so η‖x‖² < eta_max; with eta_max = 2 (default) the write alone, 1 − η‖x‖², stays in (−1, 1),
     while the network is free to use less than the full key energy. Offsets start at 0, so η·E_ref = 1.
     The ridge enters the carry too, so a regression rule's eigenvalue along x is 1 − η(‖x‖² + λ_t)
     (= 1 − η‖x‖²(1 + λ̄_t) scale-coupled), clamped: with η‖x‖² up to 2 and λ̄ up to lam_scale it reaches
     ε_γ − 2, and the state grows without bound along a key written again and again (falcon-1.3 learned
     eigenvalues to −1.5 on parity: records/tasks/beta, records/tasks/eta_bound). ``eta_bound``
     says what η is bounded by: ``ridge`` (η < eta_max / (E_ref + λ_ref), λ_ref = λ̄_t E_ref scale-coupled,
     else λ_t: exactly ctxβ's range for the normalised step, so η(‖x‖² + λ_t) < eta_max and the eigenvalue
     stays in (−1, 1)), ``energy`` (η < eta_max / E_ref, the bound before it), or ``auto`` (default): ridge
     for the regression rules falcon-1/2/3, energy for the inner-product rules 1a/2a/3a, whose transition is
     the carry γ ∈ [ε_γ, 1] alone.
   - ``const_beta``: a fixed β ∈ (0, 2) (``beta``; β > 1 is allowed).
   - ``ctx_lambda``: λ̄_t = lam_scale·σ(w·h + c) (paper appendix C.1), scale-coupled by the rule
     (λ_t = λ̄_t E_t) when ``scale_coupled_ridge`` (default). The per-head offsets c start so that λ̄ is spread
     log-uniformly over heads in [lam_init_min, lam_init_max] (multi-scale memory: with β ≈ 1 the initial
     decay fraction ≈ λ̄, so timescales from ~1/lam_init_max to ~1/lam_init_min tokens).
   - ``const_lambda``: a fixed λ̄ (``lam``; λ itself when ``scale_coupled_ridge=False``).
4. o = rule(q, k, v, β or η, λ) with window B, alignment, timing, ε, ε_γ and backend as options.
5. Output (fla style): per-head RMSNorm with a learnable gain, times SiLU(W_g h) when ``output_gate``
   (default), then the output projection.

Generation steps with ``kernels.fast_weight_step`` (O(1) per token) and the conv caches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from falcon_lab.kernels import BACKENDS, RuleSpec, fast_weight_rule, fast_weight_step, rule_spec
from falcon_lab.kernels.common.checks import check_rule_options, check_sequence_options
from falcon_lab.mixers import layers
from falcon_lab.mixers.layers import (Mixer, RMSNorm, ShortConv, full_precision, l2_norm, residual_out, rms_norm,
                           packed_chunk, sample_bounds, short_conv_step)
from falcon_lab.mixers.options import check_bool, check_choice, check_int, check_range, head_dim_of

GAINS = ("ctx_beta", "ctx_eta", "const_beta")
ETA_BOUNDS = ("auto", "ridge", "energy")
RIDGES = ("ctx_lambda", "const_lambda")
QK_NORMS = ("rmsnorm", "l2", "none")
RULE_DTYPES = ("input", "float32")


@dataclass
class FalconOptions:
    """Options of every Falcon mixer; defaults are the paper's ``.3`` settings (QK-RMSNorm, ctxη-ctxλ)."""

    qk_norm: str = "rmsnorm"
    v_norm: bool = False
    conv: bool = True
    conv_size: int = 4
    gain: str = "ctx_eta"
    beta: float = 1.0
    eta_max: float = 2.0
    eta_bound: str = "auto"  # ctxη's bound: ridge (regression rules) or energy (inner product); module docstring
    beta_max: float = 2.0
    ridge: str = "ctx_lambda"
    lam: float = 0.0
    lam_scale: float = 1.0
    lam_init_min: float = 1e-3
    lam_init_max: float = 1e-1
    scale_coupled_ridge: bool = True
    window: int = 4
    eps: float = 1e-6
    decay_floor: float = 1e-3
    alignment: str = "shifted"
    timing: str = "raw"
    backend: str = "auto"  # the fused Triton kernels on a GPU where they cover the rule, else the chunk form
    chunk_size: int = 64
    # the dtype q, k, v and the gates enter the rule in: "input" keeps the projections' (bf16 under bf16-mixed,
    # so the fused kernels round their matmul operands and the UT solve to bf16); "float32" casts them first
    # (the kernels then multiply at tf32x3, about fp32)
    rule_dtype: str = "input"
    window_block: int = 64  # falcon-3's chunk form: chunks of max(4, window_block // window) tokens (≤ chunk_size)
    output_gate: bool = True
    head_dim: int | None = None
    norm_eps: float = 1e-6

    def check(self, mixer: str) -> None:
        check_choice(mixer, "qk_norm", self.qk_norm, QK_NORMS)
        check_choice(mixer, "gain", self.gain, GAINS)
        check_choice(mixer, "eta_bound", self.eta_bound, ETA_BOUNDS)
        check_choice(mixer, "ridge", self.ridge, RIDGES)
        check_choice(mixer, "rule_dtype", self.rule_dtype, RULE_DTYPES)
        try:  # the rule's options, by the op's own checks
            check_sequence_options(alignment=self.alignment, timing=self.timing, backend=self.backend,
                                   backends=("auto", *BACKENDS), chunk_size=self.chunk_size)
            check_rule_options(window=self.window, eps=self.eps, decay_floor=self.decay_floor)
        except ValueError as err:
            raise ValueError(f"mixer {mixer!r}: {err}") from None
        for name in ("v_norm", "conv", "scale_coupled_ridge", "output_gate"):
            check_bool(mixer, name, getattr(self, name))
        for name, minimum in (("conv_size", 1), ("window_block", 1)):
            check_int(mixer, name, getattr(self, name), minimum)
        inf = float("inf")
        check_range(mixer, "beta", self.beta, 0.0, 2.0, low_open=True, high_open=True)
        check_range(mixer, "eta_max", self.eta_max, 0.0, inf, low_open=True)
        check_range(mixer, "beta_max", self.beta_max, 0.0, 2.0, low_open=True)
        check_range(mixer, "lam", self.lam, 0.0, inf)
        check_range(mixer, "lam_scale", self.lam_scale, 0.0, inf, low_open=True)
        check_range(mixer, "lam_init_min", self.lam_init_min, 0.0, self.lam_scale, low_open=True, high_open=True)
        check_range(mixer, "lam_init_max", self.lam_init_max, self.lam_init_min, self.lam_scale, high_open=True)
        check_range(mixer, "norm_eps", self.norm_eps, 0.0, inf, low_open=True)


class FalconMixer(Mixer):
    """Multi-head fast-weight layer running ``rule`` (a registered rule's name or its ``RuleSpec``: every trait
    the layer needs, the gates' shape and ctxη's bound, is the spec's); see the module docstring.

    ``forward(x, samples)`` with ``samples [B, L]`` (isolated samples: the sample of its row each token belongs
    to) restarts the fast weights and the short convolutions at every sample: the rows' samples go to the rule
    as packed sequences (``cu_seqlens``), so packing keeps its efficiency."""

    resets_at_samples = True

    def __init__(self, d_model: int, n_heads: int, opts: FalconOptions, rule: str | RuleSpec, name: str) -> None:
        super().__init__()
        self.spec = spec = rule_spec(rule)
        self.rule, self.opts, self.n_heads = spec.name, opts, n_heads
        self.head_dim = D = head_dim_of(name, d_model, n_heads, opts.head_dim)
        inner = n_heads * D
        self.per_channel = spec.per_channel
        # falcon-3's chunk form solves one (C·B) × (C·B) block-triangular system per chunk and head, and
        # autograd keeps it: at B = 8 and C = 64 that is 512 × 512 per chunk. Shorter chunks keep C·B near
        # window_block; the result is the same (up to rounding), the memory and time fall (the rules sweep ran
        # out of memory at B = 8 with C = 64: records/sweeps/rules/report.md).
        self.chunk_size = (min(opts.chunk_size, max(4, opts.window_block // opts.window)) if spec.chunk_by_window
                           else opts.chunk_size)
        self.q_proj = nn.Linear(d_model, inner, bias=False)
        self.k_proj = nn.Linear(d_model, inner, bias=False)
        self.v_proj = nn.Linear(d_model, inner, bias=False)
        self.convs = nn.ModuleList(ShortConv(inner, opts.conv_size) for _ in range(3)) if opts.conv else None
        gate_shape = (n_heads, D) if self.per_channel else (n_heads,)
        if opts.gain != "const_beta":
            self.gain_proj = nn.Linear(d_model, math.prod(gate_shape), bias=False)
            self.gain_offset = nn.Parameter(torch.zeros(gate_shape))
        if opts.ridge == "ctx_lambda":
            self.lam_proj = nn.Linear(d_model, n_heads, bias=False)
            lam0 = torch.logspace(math.log10(opts.lam_init_min), math.log10(opts.lam_init_max), n_heads)
            self.lam_offset = nn.Parameter(torch.logit(lam0 / opts.lam_scale, eps=None).to(torch.float32))
        self.o_norm = RMSNorm(D, opts.norm_eps)
        self.g_proj = nn.Linear(d_model, inner, bias=False) if opts.output_gate else None
        self.o_proj = residual_out(nn.Linear(inner, d_model, bias=False))
        # the key energy the QK-norm gives (ctxη's unit of step size)
        self.energy_ref = 1.0 if opts.qk_norm == "l2" else float(D)
        # ctxη bounded with the ridge where the ridge moves the transition's eigenvalue (the regression rules)
        self.eta_bound = spec.gain_bound if opts.eta_bound == "auto" else opts.eta_bound

    def _rule_options(self) -> dict:
        o = self.opts
        return {"rule": self.rule, "window": o.window, "eps": o.eps, "decay_floor": o.decay_floor,
                "scale_coupled_ridge": o.scale_coupled_ridge, "alignment": o.alignment, "timing": o.timing}

    def _beta_eta(self, gain: Tensor) -> tuple[Tensor | None, Tensor | None]:
        """The gates' first tensor as the op takes it, (β, None) for ctxβ and constant β, (None, η) for ctxη."""
        return (None, gain) if self.opts.gain == "ctx_eta" else (gain, None)

    def _rule_inputs(self, *ts: Tensor) -> tuple[Tensor, ...]:
        """The rule's inputs in ``rule_dtype``: half-precision ones cast to float32 where it says so."""
        if self.opts.rule_dtype == "float32" and ts[0].dtype in (torch.bfloat16, torch.float16):
            return tuple(t.float() for t in ts)
        return ts

    def _featurise(self, q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``[..., H·D]`` -> per-head ``[..., H, D]`` with QK-norm and optional VNorm."""
        q, k, v = (t.unflatten(-1, (self.n_heads, self.head_dim)) for t in (q, k, v))
        eps = self.opts.norm_eps
        if self.opts.qk_norm == "rmsnorm":
            q, k = rms_norm(q, eps), rms_norm(k, eps)
        elif self.opts.qk_norm == "l2":
            q, k = l2_norm(q, eps), l2_norm(k, eps)
        if self.opts.v_norm:
            v = rms_norm(v, eps)
        return q, k, v

    def _gates(self, h: Tensor) -> tuple[Tensor, Tensor]:
        """β (or η for ctxη) ``[..., H]`` (``[..., H, D]`` for 2/2a) and λ ``[..., H]`` from ``h [..., d]``."""
        o = self.opts
        dtype = torch.float64 if h.dtype == torch.float64 else torch.float32  # gates in full precision
        lead = h.shape[:-1]
        if o.ridge == "const_lambda":
            lam = torch.full((*lead, self.n_heads), o.lam, dtype=dtype, device=h.device)
        else:
            lam = o.lam_scale * torch.sigmoid(self.lam_proj(h).to(dtype) + self.lam_offset.to(dtype))
        if o.gain == "const_beta":
            gain = torch.full((*lead, self.n_heads), o.beta, dtype=dtype, device=h.device)
        else:
            pre = self.gain_proj(h).to(dtype).unflatten(-1, self.gain_offset.shape) + self.gain_offset.to(dtype)
            if o.gain == "ctx_beta":
                gain = o.beta_max * torch.sigmoid(pre)
            else:
                unit = self.energy_ref
                if self.eta_bound == "ridge":  # η(E_ref + λ_ref) < eta_max: the eigenvalue 1 − η(E + λ) > −1
                    unit = unit + (lam * self.energy_ref if o.scale_coupled_ridge else lam)
                    unit = unit[..., None] if self.per_channel else unit
                gain = o.eta_max * torch.sigmoid(pre) / unit
        return gain, lam

    def _output(self, o: Tensor, h: Tensor) -> Tensor:
        """Per-head norm, output gate and projection; ``o [..., H, D]``, ``h [..., d]``."""
        o = self.o_norm(o)
        if self.g_proj is not None:
            o = o * F.silu(self.g_proj(h)).unflatten(-1, (self.n_heads, self.head_dim))
        return self.o_proj(o.flatten(-2))

    def forward(self, x: Tensor, samples: Tensor | None = None) -> Tensor:
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if self.convs is not None:
            q, k, v = (conv(t, samples) for conv, t in zip(self.convs, (q, k, v)))
        q, k, v = self._featurise(q, k, v)
        gain, lam = self._gates(x)
        return self._output(self._rule(q, k, v, gain, lam, samples), x)

    @torch.compiler.disable
    def _rule(self, q: Tensor, k: Tensor, v: Tensor, gain: Tensor, lam: Tensor,
              samples: Tensor | None = None) -> Tensor:
        # Under torch.compile (train.compile) the rule stays outside the graph: its host code picks and
        # launches Triton kernels; the projections, norms, convolutions and gates around it compile.
        cu_seqlens, sample_id, chunk_size = None, None, self.chunk_size
        if samples is not None and layers.SAMPLE_IDS and self.spec.by_sample_id:
            sample_id = samples  # the rows as they are, their samples told apart by their ids
        elif samples is not None:  # every sample of every row one packed sequence of a batch of one
            cu_seqlens = sample_bounds(samples)
            if q.is_cuda and not self.spec.chunk_by_window:  # the kernels' chunks at about a sample's length
                chunk_size = packed_chunk(cu_seqlens, chunk_size)
            q, k, v, gain, lam = (t.flatten(0, 1)[None] for t in (q, k, v, gain, lam))
        q, k, v, gain, lam = self._rule_inputs(q, k, v, gain, lam)
        beta, eta = self._beta_eta(gain)
        with full_precision(q):
            o, _ = fast_weight_rule(q, k, v, beta=beta, lam=lam, eta=eta, backend=self.opts.backend,
                                    chunk_size=chunk_size, cu_seqlens=cu_seqlens, sample_id=sample_id,
                                    **self._rule_options())
        return o if cu_seqlens is None else o[0].unflatten(0, samples.shape)

    def forward_cached(self, x: Tensor, cache: dict) -> tuple[Tensor, dict]:
        """``forward`` over ``x [B, T, d]`` continuing from ``cache`` (``init_cache`` for a fresh sequence), in
        parallel, and the cache after its last token: a prompt's prefill, or a segment of a long sequence."""
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        windows = None
        if self.convs is not None:
            mixed, windows = [], []
            for conv, t, window in zip(self.convs, (q, k, v), cache["conv"]):
                past = window.shape[2]
                full = torch.cat([window.transpose(1, 2).to(t.dtype), t], dim=1)  # [B, size − 1 + T, C]
                mixed.append(conv(full)[:, past:])
                windows.append(full[:, full.shape[1] - past:].transpose(1, 2))
            q, k, v = mixed
        q, k, v = self._featurise(q, k, v)
        gain, lam = self._gates(x)
        q, k, v, gain, lam = self._rule_inputs(q, k, v, gain, lam)
        beta, eta = self._beta_eta(gain)
        with full_precision(q):
            o, state = fast_weight_rule(q, k, v, beta=beta, lam=lam, eta=eta, backend=self.opts.backend,
                                        chunk_size=self.chunk_size, initial_state=cache["state"],
                                        output_final_state=True, **self._rule_options())
        return self._output(o, x), {"conv": windows, "state": state}

    def init_cache(self, batch: int, device: torch.device | str, dtype: torch.dtype) -> dict:
        """The conv windows (if any) and the fast-weight state (None: a fresh sequence)."""
        convs = None if self.convs is None else [c.init_cache(batch, device, dtype) for c in self.convs]
        return {"conv": convs, "state": None}

    def step(self, x_t: Tensor, cache: dict) -> tuple[Tensor, dict]:
        q, k, v = self.q_proj(x_t), self.k_proj(x_t), self.v_proj(x_t)
        (q, k, v), convs = short_conv_step(self.convs, (q, k, v), cache["conv"])
        q, k, v = self._featurise(q, k, v)
        gain, lam = self._gates(x_t)
        beta, eta = self._beta_eta(gain)
        with full_precision(q):
            o, state = fast_weight_step(cache["state"], q, k, v, beta_t=beta, lam_t=lam, eta_t=eta,
                                        **self._rule_options())
        return self._output(o, x_t), {"conv": convs, "state": state}


# Paper variant presets (§5): .1 = QK-ℓ2, ctxβ-ctxλ; .2 = QK-ℓ2, ctxη-ctxλ; .3 = QK-RMSNorm, ctxη-ctxλ.
VARIANTS = {
    "1": {"qk_norm": "l2", "gain": "ctx_beta", "ridge": "ctx_lambda"},
    "2": {"qk_norm": "l2", "gain": "ctx_eta", "ridge": "ctx_lambda"},
    "3": {"qk_norm": "rmsnorm", "gain": "ctx_eta", "ridge": "ctx_lambda"},
}
