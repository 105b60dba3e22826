"""The Mamba-2 baseline: the SSD layer (Dao & Gu, 2024) via ``falcon_lab.mixers.decayed`` (``falcon_lab.kernels.linear_attention`` or
falcon-1a's fused kernels).

    [z, xBC, dt] = W_in h;   xBC = SiLU(causal depthwise conv(xBC));   [x, B, C] = xBC
    Δ_t = softplus(dt_t + dt_bias)  (per head),   A = −exp(A_log)  (per head)
    S_t = exp(Δ_t A) S_{t−1} + (Δ_t B_t) x_tᵀ,    y_t = S_tᵀ C_t + D ⊙ x_t       (per head; B, C per group)
    out = W_out · RMSNorm(y ⊙ SiLU(z))   (gated RMSNorm, normalised per group, learnable gain)

so SSD is decayed linear attention with q = C, k = Δ·B, v = x, log decay Δ·A. Initialisation as in Mamba-2:
Δ log-uniform in [dt_min, dt_max] through dt_bias, A uniform in [1, 16], D = 1. The conv has no bias by
default (the house rule of no biases; Mamba-2's own default has one: ``conv_bias=True``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from falcon_lab.mixers.decayed import BACKENDS as DECAYED_BACKENDS
from falcon_lab.mixers.decayed import RULE as DECAYED_RULE
from falcon_lab.mixers.decayed import HALF, decayed_linear_attention, decayed_over_samples, fused_refusal
from falcon_lab.mixers.layers import Mixer, ShortConv, dt_bias_init, full_precision, residual_out, rms_norm
from falcon_lab.mixers.options import check_bool, check_int, check_kernel_choices, check_range


@dataclass
class Mamba2Options:
    """expand: d_inner / d_model; head_dim: P (default d_inner / n_heads; Mamba-2's own default is 64);
    d_state: N; n_groups: groups sharing B and C. backend: ``auto`` (falcon-1a's fused kernels on a GPU for bf16 or
    fp16 inputs, else the PyTorch chunk form: this mixer forms its scan's inputs in fp32, so the chunk form), ``triton``, ``chunk`` or ``recurrent``."""

    expand: int = 2
    head_dim: int | None = None
    d_state: int = 128
    n_groups: int = 1
    conv_size: int = 4
    conv_bias: bool = False
    dt_min: float = 1e-3
    dt_max: float = 1e-1
    dt_init_floor: float = 1e-4
    A_init_min: float = 1.0
    A_init_max: float = 16.0
    alignment: str = "same_time"
    timing: str = "raw"
    backend: str = "auto"
    chunk_size: int = 64
    norm_eps: float = 1e-5

    def check(self, mixer: str) -> None:
        for name in ("expand", "d_state", "n_groups", "conv_size", "chunk_size"):
            check_int(mixer, name, getattr(self, name), 1)
        if self.head_dim is not None:
            check_int(mixer, "head_dim", self.head_dim, 1)
        check_bool(mixer, "conv_bias", self.conv_bias)
        check_range(mixer, "dt_min", self.dt_min, 0.0, float("inf"), low_open=True)
        check_range(mixer, "dt_max", self.dt_max, self.dt_min, float("inf"))
        check_range(mixer, "dt_init_floor", self.dt_init_floor, 0.0, float("inf"), low_open=True)
        check_range(mixer, "A_init_min", self.A_init_min, 0.0, float("inf"), low_open=True)
        check_range(mixer, "A_init_max", self.A_init_max, self.A_init_min, float("inf"))
        check_kernel_choices(mixer, self.alignment, self.timing, self.backend, DECAYED_BACKENDS)
        check_range(mixer, "norm_eps", self.norm_eps, 0.0, float("inf"), low_open=True)


class Mamba2(Mixer):
    """The Mamba-2 (SSD) layer; see the module docstring."""

    resets_at_samples = True
    spec = DECAYED_RULE  # falcon-1a: its fused kernels run the decayed linear attention (mixers/decayed.py)

    def __init__(self, d_model: int, n_heads: int, opts: Mamba2Options, name: str = "mamba2") -> None:
        super().__init__()
        self.opts = opts
        d_inner = opts.expand * d_model
        if opts.head_dim is None and d_inner % n_heads:
            raise ValueError(f"mixer {name!r}: d_inner = expand·d_model = {d_inner} is not divisible by "
                             f"n_heads={n_heads}; choose n_heads dividing it or pass head_dim")
        P = opts.head_dim or d_inner // n_heads
        if d_inner % P:
            raise ValueError(f"mixer {name!r}: head_dim={P} does not divide d_inner = {d_inner}")
        H, G, N = d_inner // P, opts.n_groups, opts.d_state
        if H % G:
            raise ValueError(f"mixer {name!r}: n_groups={G} does not divide the {H} heads")
        self.d_inner, self.n_heads, self.head_dim, self.n_groups, self.d_state = d_inner, H, P, G, N
        self.in_proj = nn.Linear(d_model, 2 * d_inner + 2 * G * N + H, bias=False)
        self.conv = ShortConv(d_inner + 2 * G * N, opts.conv_size, bias=opts.conv_bias)
        self.dt_bias = nn.Parameter(dt_bias_init(H, opts.dt_min, opts.dt_max, opts.dt_init_floor))
        self.A_log = nn.Parameter(torch.log(torch.empty(H).uniform_(opts.A_init_min, opts.A_init_max)))
        self.D = nn.Parameter(torch.ones(H))
        self.norm_weight = nn.Parameter(torch.ones(d_inner))
        self.out_proj = residual_out(nn.Linear(d_inner, d_model, bias=False))

    def _split(self, zxbcdt: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        d, GN = self.d_inner, self.n_groups * self.d_state
        return zxbcdt.split([d, d + 2 * GN, self.n_heads], dim=-1)

    def _ssd_inputs(self, xBC: Tensor, dt: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """q = C, k = Δ·B, v = x per head, log decay Δ·A; inputs ``[B, L, ...]``."""
        d, GN = self.d_inner, self.n_groups * self.d_state
        x, Bm, Cm = xBC.split([d, GN, GN], dim=-1)
        x = x.unflatten(-1, (self.n_heads, self.head_dim))
        per_group = self.n_heads // self.n_groups

        def heads(t: Tensor) -> Tensor:  # [..., G·N] -> [..., H, N], each group shared by its heads
            return t.unflatten(-1, (self.n_groups, self.d_state)).repeat_interleave(per_group, -2)

        # the scan runs in full precision anyway: form Δ·B there rather than in half precision
        dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
        delta = F.softplus(dt.to(dtype) + self.dt_bias.to(dtype))  # [B, L, H]
        log_decay = delta * -torch.exp(self.A_log.to(dtype))
        k = heads(Bm.to(dtype)) * delta[..., None]
        return heads(Cm.to(dtype)), k, x.to(dtype), log_decay

    def _output(self, y: Tensor, x: Tensor, z: Tensor) -> Tensor:
        y = y + self.D.to(y.dtype)[:, None] * x  # the skip D ⊙ x
        gated = y.flatten(-2) * F.silu(z.to(y.dtype))
        groups = gated.unflatten(-1, (self.n_groups, -1))
        normed = rms_norm(groups, self.opts.norm_eps).flatten(-2) * self.norm_weight.to(y.dtype)
        return self.out_proj(normed.to(z.dtype))

    def _scan(self, q: Tensor, k: Tensor, v: Tensor, g: Tensor, backend: str, state=None,
              chunk_size: int | None = None):
        with full_precision(q):
            return decayed_linear_attention(q, k, v, g, alignment=self.opts.alignment, timing=self.opts.timing,
                                            backend=backend, chunk_size=chunk_size or self.opts.chunk_size,
                                            initial_state=state, output_final_state=state is not None)

    def forward(self, h: Tensor, samples: Tensor | None = None) -> Tensor:
        """``samples [B, L]`` (isolated samples: the sample of its row each token belongs to): the convolution
        and the scan restart at every sample; the projections and the convolution run on the packed rows, the
        scan over the samples as packed sequences (kernels) or laid one to a row."""
        z, xBC, dt = self._split(self.in_proj(h))
        q, k, v, g = self._ssd_inputs(self.conv(xBC, samples), dt)
        # "auto" takes the kernels where the activations are half precision on a GPU, as for the other mixers: q, k
        # and v go to them in that precision (Δ·B formed in fp32 first; fp32 inputs would take the kernels' exact
        # fp32 products, several times slower), the log decay in fp32; the scan accumulates in fp32 either way
        backend, scan = self.opts.backend, (q, k, v, g)
        if (backend == "auto" and xBC.is_cuda and xBC.dtype in HALF
                and fused_refusal(q, v, self.opts.chunk_size) is None):
            backend, scan = "triton", (q.to(xBC.dtype), k.to(xBC.dtype), v.to(xBC.dtype), g)
        if samples is None:
            y, _ = self._scan(*scan, backend)
        else:
            with full_precision(q):
                y = decayed_over_samples(*scan, samples, alignment=self.opts.alignment, timing=self.opts.timing,
                                         backend=backend, chunk_size=self.opts.chunk_size)
        return self._output(y.to(v.dtype), v, z)

    def init_cache(self, batch: int, device: torch.device | str, dtype: torch.dtype) -> dict:
        """The conv window and the SSM state (a bare zero S: a fresh sequence)."""
        state_dtype = torch.float64 if dtype == torch.float64 else torch.float32
        S = torch.zeros(batch, self.n_heads, self.d_state, self.head_dim, device=device, dtype=state_dtype)
        return {"conv": self.conv.init_cache(batch, device, dtype), "state": S}

    def step(self, h_t: Tensor, cache: dict) -> tuple[Tensor, dict]:
        z, xBC, dt = self._split(self.in_proj(h_t))
        xBC, conv = self.conv.step(xBC, cache["conv"])
        q, k, v, g = self._ssd_inputs(xBC[:, None], dt[:, None])
        y, state = self._scan(q, k, v, g, "recurrent", cache["state"])
        return self._output(y[:, 0], v[:, 0], z), {"conv": conv, "state": state}
