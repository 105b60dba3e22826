"""Building blocks shared by the mixers and the model: norms, the short causal convolution, SwiGLU, RoPE,
and the ``Mixer`` interface every token mixer implements."""

from __future__ import annotations

import math
import os
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from falcon_lab.kernels.common import packed

try:
    from falcon_lab.kernels.conv import short_conv as fused_short_conv
except ImportError:  # no Triton: every short convolution takes ShortConv's PyTorch form
    fused_short_conv = None

# Samples of packed rows on the kernels that take them by their ids (decayed attention's, the gated delta rule's,
# every rule's but falcon-2a's): the rows as they are, in full chunks, shapes that follow the batch's alone and no
# host read, rather than the samples as packed sequences (``sample_bounds``). On by default: every recurrent row's
# step 10-41% cheaper on an H100 with CUDA graphs (records/bench/samples-by-id/); ``LAB_SAMPLE_IDS=0`` turns it off
# (read as ``layers.SAMPLE_IDS`` at each call).
SAMPLE_IDS = os.environ.get("LAB_SAMPLE_IDS", "1") not in ("", "0")


@contextmanager
def sample_ids_set(on: bool | None) -> Iterator[None]:
    """``SAMPLE_IDS`` set to ``on`` inside the block and restored after it (None: left as it is)."""
    global SAMPLE_IDS
    before = SAMPLE_IDS
    if on is not None:
        SAMPLE_IDS = on
    try:
        yield
    finally:
        SAMPLE_IDS = before


def _wide(x: Tensor) -> Tensor:
    """Half-precision inputs are normalised in float32; float32/float64 keep their own precision."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def rms_norm(x: Tensor, eps: float) -> Tensor:
    """Parameter-free RMSNorm over the last axis: ``u / sqrt(‖u‖²/d + eps)`` (paper §4.1), so ‖·‖² ≤ d."""
    w = _wide(x)
    return (w * torch.rsqrt(w.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def l2_norm(x: Tensor, eps: float) -> Tensor:
    """ℓ2 normalisation over the last axis: ``u / sqrt(‖u‖² + eps)`` (the DeltaNet convention)."""
    w = _wide(x)
    return (w * torch.rsqrt(w.pow(2).sum(-1, keepdim=True) + eps)).to(x.dtype)


class RMSNorm(nn.Module):
    """RMSNorm with a learnable per-channel gain (initialised to 1) over the last axis."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        return rms_norm(x, self.eps) * self.weight.to(x.dtype)


def residual_out(linear: nn.Linear) -> nn.Linear:
    """Mark a projection that writes into the residual stream; the model scales its initialisation by
    ``1/sqrt(2·n_layers)`` (GPT-2) so the residual variance does not grow with depth."""
    linear.residual_out = True
    return linear


def fused_conv(x: Tensor) -> bool:
    """Whether ``ShortConv`` takes the fused kernel for ``x``: a CUDA tensor in bf16, fp16 or fp32, Triton
    importable."""
    return fused_short_conv is not None and x.is_cuda and x.dtype in (torch.bfloat16, torch.float16, torch.float32)


class ShortConv(nn.Module):
    """Short causal depthwise convolution over time followed by SiLU (the usual fla-style ShortConvolution).

    ``forward`` takes ``[B, L, C]``; ``step`` takes one token ``[B, C]`` with a cache of the last
    ``size − 1`` inputs ``[B, C, size − 1]`` (oldest first) and equals ``forward`` token by token.
    """

    def __init__(self, channels: int, size: int = 4, bias: bool = False) -> None:
        super().__init__()
        self.size = size
        self.conv = nn.Conv1d(channels, channels, size, groups=channels, padding=size - 1, bias=bias)

    def forward(self, x: Tensor, samples: Tensor | None = None) -> Tensor:
        """``samples`` ``[B, L]`` (isolated samples: the sample of its row each token belongs to): the window
        of a token holds only tokens of its own sample, as if each sample began a sequence.

        CUDA tensors take one fused Triton kernel each way (``falcon_lab.kernels.conv``, accumulating in float32);
        the PyTorch below is its exact twin and what a CPU runs."""
        if fused_conv(x):
            return fused_short_conv(x, self.conv.weight[:, 0], self.conv.bias, samples)
        if samples is None:
            y = self.conv(x.transpose(1, 2))[..., : x.shape[1]]  # left padding only: causal
            return F.silu(y.transpose(1, 2))
        w = self.conv.weight[:, 0].to(x.dtype)  # [C, size]; tap size - 1 - j weighs the token j back
        y = x * w[:, -1]
        for j in range(1, min(self.size, x.shape[1])):
            same = (samples[:, j:] == samples[:, :-j])[..., None]
            y = y + F.pad((x[:, :-j] * same) * w[:, -1 - j], (0, 0, j, 0))
        if self.conv.bias is not None:
            y = y + self.conv.bias.to(x.dtype)
        return F.silu(y)

    def init_cache(self, batch: int, device: torch.device | str, dtype: torch.dtype) -> Tensor:
        return torch.zeros(batch, self.conv.in_channels, self.size - 1, device=device, dtype=dtype)

    def step(self, x_t: Tensor, cache: Tensor) -> tuple[Tensor, Tensor]:
        window = torch.cat([cache, x_t[:, :, None]], dim=2)  # [B, C, size], oldest first
        y = (window * self.conv.weight[:, 0].to(x_t.dtype)).sum(-1)
        if self.conv.bias is not None:
            y = y + self.conv.bias.to(x_t.dtype)
        return F.silu(y), window[:, :, 1:]


class SwiGLU(nn.Module):
    """The LLaMA MLP: ``down(silu(gate(x)) ⊙ up(x))``, no bias."""

    def __init__(self, d_model: int, hidden: int) -> None:
        super().__init__()
        self.gate = nn.Linear(d_model, hidden, bias=False)
        self.up = nn.Linear(d_model, hidden, bias=False)
        self.down = residual_out(nn.Linear(hidden, d_model, bias=False))

    def forward(self, x: Tensor) -> Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


def dt_bias_init(n: int, dt_min: float, dt_max: float, floor: float) -> Tensor:
    """Mamba-2's step-size offsets: ``softplus(dt_bias)`` log-uniform in [dt_min, dt_max], at least ``floor``."""
    dt = torch.exp(torch.rand(n) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))
    dt = dt.clamp(min=floor)
    return dt + torch.log(-torch.expm1(-dt))  # the inverse of softplus


def sample_starts(samples: Tensor) -> Tensor:
    """``[B·L]`` boolean: whether each token of the packed rows (``samples [B, L]``, the sample of its row each
    token belongs to) opens a sample."""
    first = torch.ones_like(samples, dtype=torch.bool)
    first[:, 1:] = samples[:, 1:] != samples[:, :-1]
    return first.flatten()


def chunk_for(longest: int, size: int) -> int:
    """A chunk size for a chunked form over samples at most ``longest`` tokens long: ``size``, or the smallest
    power of two from 16 that holds the longest sample when that is shorter (the chunked forms pad each sample to
    whole chunks, and the samples of a packed row can be a few tokens long)."""
    return min(size, max(16, 1 << (longest - 1).bit_length()))


def packed_chunk(bounds: Tensor, size: int) -> int:
    """The kernels' chunk size over packed samples (``bounds`` their ``cu_seqlens``): the largest of 16, 32 and 64
    no longer than the samples' mean length, at most ``size``. Every sample begins a chunk and pads its last one,
    so chunks of about a sample's length waste less than chunks that hold the longest: over the same-time
    table's samples (about 40 tokens, up to about 100) 32-token chunks took falcon-1a.3's compiled step from 46.0
    to 40.5 ms and falcon-1.3's from 60.1 to 47.5 ms on an H100 (16-token ones 49.8 ms for falcon-1.3)."""
    ends = packed.offsets(bounds)
    mean = ends[-1] / max(1, len(ends) - 1)
    chunk = 16
    while chunk < 64 and 2 * chunk <= mean:
        chunk *= 2
    return min(size, chunk)


def sample_bounds(samples: Tensor) -> Tensor:
    """``cu_seqlens`` of the packed rows' samples read as one row of ``B·L`` tokens: every sample of every row a
    packed sequence of a batch of one (flatten ``[B, L, ...]`` inputs to ``[1, B·L, ...]`` to match)."""
    return packed.memo(samples, "bounds", lambda: _bounds(samples))  # one tensor a step for every layer


def _bounds(samples: Tensor) -> Tensor:
    starts = sample_starts(samples).nonzero().flatten()
    return torch.cat([starts, starts.new_full((1,), samples.numel())])


def sample_places(samples: Tensor) -> Tensor:
    """``[B·L]``: each token's place in its sample (0 at its first token), from static-shape operations only (no
    host sync, nothing for torch.compile to break on)."""
    first = sample_starts(samples)
    index = torch.arange(first.numel(), device=samples.device)
    return index - torch.where(first, index, torch.zeros_like(index)).cummax(0).values


def padded_length(longest: int) -> int:
    """The length the samples' rows are padded to: the chunked forms' own padding at chunks of up to 64
    (``chunk_for``: 16, 32 or 64 tokens, or whole chunks of 64 past that), so that a compiled model sees a few
    row lengths over a curriculum rather than one for every longest sample."""
    return max(16, 1 << (longest - 1).bit_length()) if longest <= 64 else -(-longest // 64) * 64


@torch.compiler.disable
def _extent(samples: Tensor, which: Tensor, at: Tensor) -> tuple[int, int]:
    """(samples, padded row length): the one host sync of ``SampleRows``, outside torch.compile's graph, made once
    per ``samples`` for every layer (``falcon_lab.kernels.common.packed.memo``), its row length bucketed (``padded_length``)
    so that the graph after it recompiles for a few lengths only."""
    return packed.memo(samples, "extent", lambda: (int(which[-1]) + 1, padded_length(int(at.max()) + 1)))


class SampleRows:
    """The samples of packed rows (``samples [B, L]``) laid one to a row, padded at their ends: ``apart(t)`` takes
    ``t [B, L, ...]`` to ``[N, longest, ...]`` (zeros after each sample's last token, which a causal map's outputs
    cannot see; ``longest`` the longest sample's length padded as the chunked forms pad it, ``padded_length``) and
    ``back(t)`` takes such rows back to ``[B, L, ...]``."""

    def __init__(self, samples: Tensor) -> None:
        self.which = sample_starts(samples).cumsum(0) - 1  # the sample of every token, counted over the whole batch
        self.at = sample_places(samples)  # its place in it
        self.shape = samples.shape
        self.count, self.longest = _extent(samples, self.which, self.at)

    def apart(self, t: Tensor) -> Tensor:
        rows = t.new_zeros(self.count, self.longest, *t.shape[2:])
        rows[self.which, self.at] = t.flatten(0, 1)
        return rows

    def back(self, t: Tensor) -> Tensor:
        return t[self.which, self.at].unflatten(0, self.shape)

    def places(self) -> Tensor:
        """``[B, L]``: each token's place in its sample (0 at its first token)."""
        return self.at.view(self.shape)

    def chunk(self, size: int) -> int:
        """A chunk size for a chunked form over these rows (``chunk_for`` their padded length)."""
        return chunk_for(self.longest, size)


def full_precision(x: Tensor) -> torch.autocast:
    """A region where autocast is off, around the fast-weight ops: they cast their inputs to fp32 (float64
    for float64) and keep state and accumulation there; autocast would silently run their matmuls, Gram
    solves and eigenvalue problems in half precision again."""
    return torch.autocast(device_type=x.device.type, enabled=False)


def rotary(x: Tensor, positions: Tensor, base: float) -> Tensor:
    """Rotary position embedding (half-split pairs) of ``x [B, L, H, D]`` at integer ``positions [L]`` (or
    ``[B, L]``, a row's own)."""
    D = x.shape[-1]
    if D % 2:
        raise ValueError(f"rotary embeddings need an even head dimension, got {D}")
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    angles = rotary_angles(positions, D, base, dtype)
    return rotate(x, angles.cos(), angles.sin())


def rotary_angles(positions: Tensor, dim: int, base: float, dtype: torch.dtype) -> Tensor:
    """RoPE's angles ``[..., dim / 2]`` at ``positions [...]``."""
    inv_freq = base ** (-torch.arange(0, dim, 2, device=positions.device, dtype=dtype) / dim)
    return positions.to(dtype)[..., None] * inv_freq


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """``x [B, L, H, D]`` rotated by the angles whose ``cos`` and ``sin`` are ``[L, D/2]`` or ``[B, L, D/2]``,
    in the angles' precision."""
    cos, sin = (t if t.dim() == 3 else t[None] for t in (cos, sin))
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    x1, x2 = x.to(cos.dtype).chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)


class Rotary(nn.Module):
    """``rotary`` with the cosines and sines of positions ``0 .. TABLE - 1`` computed once and kept (buffers, not in
    the state dict). Computed inside the step, a compiled model recomputes them in every kernel that rotates q or k,
    for every element: on an H100 that was 5 of the transformer's 24 ms a step at the same-time table's size
    (records/bench/). Positions past the table and float64 inputs take ``rotary`` itself."""

    TABLE = 8192

    def __init__(self, dim: int, base: float) -> None:
        super().__init__()
        if dim % 2:
            raise ValueError(f"rotary embeddings need an even head dimension, got {dim}")
        self.base = base
        angles = rotary_angles(torch.arange(self.TABLE), dim, base, torch.float32)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x: Tensor, positions: Tensor | None = None, start: int = 0) -> Tensor:
        """``x [B, L, H, D]`` rotated at ``positions [L]`` or ``[B, L]`` (each below ``L``: a sample's own places),
        or at ``start .. start + L - 1`` when ``positions`` is None."""
        L = x.shape[1]
        if x.dtype == torch.float64 or (start + L if positions is None else L) > self.cos.shape[0]:
            at = torch.arange(start, start + L, device=x.device) if positions is None else positions
            return rotary(x, at, self.base)
        cos, sin = self.cos.float(), self.sin.float()
        if positions is None:
            return rotate(x, cos[start:start + L], sin[start:start + L])
        return rotate(x, cos[positions], sin[positions])


class Mixer(nn.Module, ABC):
    """A causal token mixer ``[B, L, d_model] -> [B, L, d_model]``.

    Generation: ``cache = init_cache(batch, device, dtype)``, then ``y_t, cache = step(x_t, cache)`` with
    ``x_t [B, d_model]``; stepping token by token equals ``forward`` over the same tokens.

    ``spec``: the rule (``falcon_lab.kernels.RuleSpec``) whose op the mixer runs or shares, None for a mixer of
    its own op (attention).
    """

    spec: Any = None

    @abstractmethod
    def forward(self, x: Tensor) -> Tensor:
        """Mix a whole sequence ``[B, L, d_model]`` causally."""

    @abstractmethod
    def init_cache(self, batch: int, device: torch.device | str, dtype: torch.dtype) -> Any:
        """The generation cache of a fresh sequence."""

    @abstractmethod
    def step(self, x_t: Tensor, cache: Any) -> tuple[Tensor, Any]:
        """Advance one token ``[B, d_model]``; returns the output and the new cache."""


def short_conv_step(convs: nn.ModuleList | None, tensors: tuple[Tensor, ...],
                    caches: list | None) -> tuple[tuple[Tensor, ...], list | None]:
    """One token of each tensor through its short causal conv (``convs`` None: no conv, unchanged).
    Returns the convolved tensors and the convs' new windows."""
    if convs is None:
        return tensors, caches
    stepped = [conv.step(t, c) for conv, t, c in zip(convs, tensors, caches)]
    out, windows = zip(*stepped)
    return tuple(out), list(windows)
