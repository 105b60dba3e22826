"""The RetNet baseline: multi-scale retention (Sun et al., 2023) via ``falcon_lab.mixers.decayed`` (``falcon_lab.kernels.linear_attention``
or falcon-1a's fused kernels).

Per head h, with a fixed decay γ_h = 1 − 2^(−5−h) (h = 0..H−1, RetNet's multi-scale schedule):

    S_t = γ_h S_{t−1} + k_t v_tᵀ,   o_t = S_tᵀ q_t / sqrt(Dk),

q and k rotated by RoPE (RetNet's relative position θ; xPos's extra length scaling is left out, as in
RetNet's released code), values ``value_factor``× wider than keys (2 in RetNet), then a per-head
parameter-free RMS group norm, a swish gate ``swish(W_g h)`` and the output projection.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from falcon_lab.mixers.decayed import BACKENDS as DECAYED_BACKENDS
from falcon_lab.mixers.decayed import RULE as DECAYED_RULE
from falcon_lab.mixers.decayed import decayed_linear_attention, decayed_over_samples
from falcon_lab.mixers.layers import Mixer, Rotary, full_precision, residual_out, rms_norm, sample_places
from falcon_lab.mixers.options import check_bool, check_int, check_kernel_choices, check_range, head_dim_of


@dataclass
class RetNetOptions:
    """head_dim: key width per head (default d_model / n_heads); value_factor: value width / key width. backend:
    ``auto`` (falcon-1a's fused kernels on a GPU for bf16 or fp16 inputs, else the PyTorch chunk form), ``triton``,
    ``chunk`` or ``recurrent`` (``falcon_lab.mixers.decayed``)."""

    head_dim: int | None = None
    value_factor: int = 2
    rope: bool = True
    rope_base: float = 10000.0
    alignment: str = "same_time"
    timing: str = "raw"
    backend: str = "auto"
    chunk_size: int = 64
    norm_eps: float = 1e-6

    def check(self, mixer: str) -> None:
        check_int(mixer, "value_factor", self.value_factor, 1)
        check_bool(mixer, "rope", self.rope)
        check_range(mixer, "rope_base", self.rope_base, 1.0, float("inf"), low_open=True)
        check_kernel_choices(mixer, self.alignment, self.timing, self.backend, DECAYED_BACKENDS)
        check_int(mixer, "chunk_size", self.chunk_size, 1)
        check_range(mixer, "norm_eps", self.norm_eps, 0.0, float("inf"), low_open=True)


def retention_decays(n_heads: int) -> Tensor:
    """log γ_h with γ_h = 1 − 2^(−5−h), ``[n_heads]`` in float64."""
    return torch.log1p(-(2.0 ** (-5.0 - torch.arange(n_heads, dtype=torch.float64))))


class Retention(Mixer):
    """Multi-scale retention; see the module docstring."""

    resets_at_samples = True
    spec = DECAYED_RULE  # falcon-1a: its fused kernels run the decayed linear attention (mixers/decayed.py)

    def __init__(self, d_model: int, n_heads: int, opts: RetNetOptions, name: str = "retnet") -> None:
        super().__init__()
        self.opts, self.n_heads = opts, n_heads
        self.dk = head_dim_of(name, d_model, n_heads, opts.head_dim)
        self.dv = self.dk * opts.value_factor
        self.q_proj = nn.Linear(d_model, n_heads * self.dk, bias=False)
        self.k_proj = nn.Linear(d_model, n_heads * self.dk, bias=False)
        self.v_proj = nn.Linear(d_model, n_heads * self.dv, bias=False)
        self.g_proj = nn.Linear(d_model, n_heads * self.dv, bias=False)
        self.o_proj = residual_out(nn.Linear(n_heads * self.dv, d_model, bias=False))
        self.register_buffer("log_decay", retention_decays(n_heads), persistent=False)
        self.rotary = Rotary(self.dk, opts.rope_base) if opts.rope else None

    def _qkv(self, x: Tensor, positions: Tensor | None = None,
             start: int = 0) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """q, k (rotated at ``positions``, else at ``start ..``, with RoPE), v and the log-decays."""
        B, L, _ = x.shape
        q = self.q_proj(x).view(B, L, self.n_heads, self.dk)
        k = self.k_proj(x).view(B, L, self.n_heads, self.dk)
        if self.rotary is not None:
            q, k = self.rotary(q, positions, start), self.rotary(k, positions, start)
        v = self.v_proj(x).view(B, L, self.n_heads, self.dv)
        dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
        g = self.log_decay.to(dtype).expand(B, L, self.n_heads)
        return q, k, v, g

    def _output(self, o: Tensor, x: Tensor) -> Tensor:
        o = rms_norm(o, self.opts.norm_eps).flatten(-2)  # group norm: one group per head
        return self.o_proj(o * F.silu(self.g_proj(x)))

    def _retain(self, q: Tensor, k: Tensor, v: Tensor, g: Tensor, backend: str, state=None,
                chunk_size: int | None = None):
        with full_precision(q):
            return decayed_linear_attention(q, k, v, g, scale=1.0 / math.sqrt(self.dk),
                                            alignment=self.opts.alignment, timing=self.opts.timing, backend=backend,
                                            chunk_size=chunk_size or self.opts.chunk_size, initial_state=state,
                                            output_final_state=state is not None)

    def forward(self, x: Tensor, samples: Tensor | None = None) -> Tensor:
        """``samples [B, L]`` (isolated samples: the sample of its row each token belongs to): retention restarts
        at every sample, the rotary positions counted from each sample's first token; the projections run on the
        packed rows, the retention over the samples as packed sequences (kernels) or laid one to a row."""
        if samples is None:
            q, k, v, g = self._qkv(x)
            o, _ = self._retain(q, k, v, g, self.opts.backend)
            return self._output(o, x)
        q, k, v, g = self._qkv(x, sample_places(samples).view(samples.shape))
        with full_precision(q):
            o = decayed_over_samples(q, k, v, g, samples, scale=1.0 / math.sqrt(self.dk),
                                     alignment=self.opts.alignment, timing=self.opts.timing,
                                     backend=self.opts.backend, chunk_size=self.opts.chunk_size)
        return self._output(o, x)

    def init_cache(self, batch: int, device: torch.device | str, dtype: torch.dtype) -> dict:
        """The retention state (a bare zero S: a fresh sequence) and the next position."""
        state_dtype = torch.float64 if dtype == torch.float64 else torch.float32
        S = torch.zeros(batch, self.n_heads, self.dk, self.dv, device=device, dtype=state_dtype)
        return {"state": S, "position": 0}

    def step(self, x_t: Tensor, cache: dict) -> tuple[Tensor, dict]:
        q, k, v, g = self._qkv(x_t[:, None], start=cache["position"])
        o, state = self._retain(q, k, v, g, "recurrent", cache["state"])
        return self._output(o[:, 0], x_t), {"state": state, "position": cache["position"] + 1}
