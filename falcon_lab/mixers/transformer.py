"""The Transformer baseline: LLaMA-style multi-head causal softmax attention with RoPE (SDPA), KV cache.

`rope=False` gives the NoPE variant: no position signal but the causal mask, the length-generalisation
baseline of Kazemnejad et al. (2023)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from falcon_lab.mixers.layers import Mixer, Rotary, residual_out
from falcon_lab.mixers.options import check_bool, check_range, head_dim_of


@dataclass
class TransformerOptions:
    """head_dim: per-head width (default d_model / n_heads); rope: rotate q and k by position (False: NoPE);
    rope_base: RoPE base frequency."""

    head_dim: int | None = None
    rope: bool = True
    rope_base: float = 10000.0

    def check(self, mixer: str) -> None:
        check_bool(mixer, "rope", self.rope)
        check_range(mixer, "rope_base", self.rope_base, 1.0, float("inf"), low_open=True)


class Attention(Mixer):
    """``softmax(q kᵀ / sqrt(D) + causal mask) v`` per head, RoPE on q and k (unless NoPE), no bias.

    ``forward(x, mask)`` takes a boolean ``[B, 1, L, L]`` mask (True: attend) in place of the causal one,
    as isolated samples give it (``falcon_lab.mixers.positions.sample_mask``); RoPE is relative, so a sample's attention
    under that mask does not depend on where its row places it."""

    masks_samples = True

    def __init__(self, d_model: int, n_heads: int, opts: TransformerOptions, name: str = "transformer") -> None:
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = head_dim_of(name, d_model, n_heads, opts.head_dim)
        self.rotary = Rotary(self.head_dim, opts.rope_base) if opts.rope else None
        inner = n_heads * self.head_dim
        self.q_proj = nn.Linear(d_model, inner, bias=False)
        self.k_proj = nn.Linear(d_model, inner, bias=False)
        self.v_proj = nn.Linear(d_model, inner, bias=False)
        self.o_proj = residual_out(nn.Linear(inner, d_model, bias=False))

    def _qkv(self, x: Tensor, start: int = 0) -> tuple[Tensor, Tensor, Tensor]:
        """Heads-first ``[B, H, L, D]`` q, k (rotated at positions ``start ..``, with RoPE) and v."""
        B, L, _ = x.shape
        q, k, v = (p(x).view(B, L, self.n_heads, self.head_dim) for p in (self.q_proj, self.k_proj, self.v_proj))
        if self.rotary is not None:
            q, k = self.rotary(q, start=start), self.rotary(k, start=start)
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        B, L, _ = x.shape
        q, k, v = self._qkv(x)
        if mask is None:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o_proj(o.transpose(1, 2).reshape(B, L, -1))

    def init_cache(self, batch: int, device: torch.device | str, dtype: torch.dtype) -> dict:
        """Keys and values seen so far ``[B, H, t, D]`` and the next position."""
        empty = torch.zeros(batch, self.n_heads, 0, self.head_dim, device=device, dtype=dtype)
        return {"k": empty, "v": empty.clone(), "position": 0}

    def step(self, x_t: Tensor, cache: dict) -> tuple[Tensor, dict]:
        q, k, v = self._qkv(x_t[:, None], cache["position"])
        keys = torch.cat([cache["k"], k], dim=2)
        values = torch.cat([cache["v"], v], dim=2)
        o = F.scaled_dot_product_attention(q, keys, values)  # one query sees every cached token
        y = self.o_proj(o.transpose(1, 2).reshape(x_t.shape[0], -1))
        return y, {"k": keys, "v": values, "position": cache["position"] + 1}
