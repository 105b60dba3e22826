"""Decayed linear attention for the RetNet and Mamba-2 mixers, on the fastest form that takes the inputs:

    S_t = exp(g_t) S_{t−1} + x_t v_tᵀ,    o_t = scale · S_tᵀ q_t (RAW)  or  scale · S_{t−1}ᵀ q_t (RBW),

x_t = k_t (same-time) or k_{t−1} (shifted). ``backend="triton"`` (and ``"auto"`` on a GPU) runs falcon-1a's fused
chunk kernels with their gates given as they are, η_t = 1 and log γ_t = g_t (the public op
``falcon_lab.kernels.decayed_attention``, exact: no floor on the carry; ``RULE``), the scale folded into q; the
others are ``falcon_lab.kernels.linear_attention``'s PyTorch forms. ``"auto"`` takes the kernels for bf16 and fp16 inputs
only: fp32 inputs (Mamba-2 forms its scan's inputs in fp32) run their products at IEEE fp32, and at the same-time
table's shape Mamba-2's training step took 774 GPU ms on them against 250 on the chunk form (one H200,
records/bench/step-apart). Under torch.compile the kernels' call stays outside the graph (Inductor does not take
these kernels' launches); the chunk form compiles. As for DeltaNet on falcon-1's kernels, the mixer makes
this call, not the baseline op (a baseline's kernels import ``falcon_lab.kernels.common`` only). The fused path runs fresh
sequences with no state out (training and evaluation); a call with a state in or out (prefill, decoding) takes the
chunk form. Isolated samples (``decayed_over_samples``) reach the kernels as packed sequences of one row
(``cu_seqlens``), so the samples of a packed batch are not padded to the longest; or, with
``falcon_lab.mixers.layers.SAMPLE_IDS`` (on unless ``LAB_SAMPLE_IDS=0``) or ``sample_ids=True``, as the rows they
are, in full chunks with each token's sample id (``decayed_attention(..., sample_id=)``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from falcon_lab.kernels import decayed_attention, linear_attention, rule_spec
from falcon_lab.kernels.common import packed
from falcon_lab.kernels.common.checks import interpreting
from falcon_lab.kernels.common.config import CHUNK_SIZES, FUSED_MAX_HEAD_DIM
from falcon_lab.kernels.common.state import FastWeightState
from falcon_lab.kernels.linear_attention import BACKENDS as LINEAR_ATTENTION_BACKENDS
from falcon_lab.mixers import layers
from falcon_lab.mixers.layers import SampleRows, chunk_for, packed_chunk, sample_bounds, sample_starts

BACKENDS = ("auto", *LINEAR_ATTENTION_BACKENDS, "triton")
RULE = rule_spec("falcon-1a")  # the Falcon rule whose fused kernels the "triton" backend shares
FUSED_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
HALF = (torch.bfloat16, torch.float16)  # the dtypes backend="auto" runs on the kernels


def fused_refusal(q: Tensor, v: Tensor, chunk_size: int) -> str | None:
    """Why the fused kernels cannot take these inputs, or None: q, k, v in bf16, fp16 or fp32, Dk and Dv up to
    ``FUSED_MAX_HEAD_DIM``, a chunk size of ``CHUNK_SIZES``, CUDA tensors (or Triton's interpreter)."""
    if q.dtype not in FUSED_DTYPES:
        return f"backend='triton' takes q, k, v in bf16, fp16 or fp32; got {q.dtype} (use backend='chunk')"
    if max(q.shape[-1], v.shape[-1]) > FUSED_MAX_HEAD_DIM:
        return f"backend='triton' takes Dk, Dv up to {FUSED_MAX_HEAD_DIM}; got Dk={q.shape[-1]}, Dv={v.shape[-1]}"
    if chunk_size not in CHUNK_SIZES:
        return f"chunk_size={chunk_size} for backend='triton'; accepted: {', '.join(map(str, CHUNK_SIZES))}"
    if not (q.is_cuda or interpreting()):
        return "backend='triton' needs CUDA tensors (or TRITON_INTERPRET=1); use backend='chunk'"
    return None


def decayed_linear_attention(q: Tensor, k: Tensor, v: Tensor, g: Tensor, *, scale: float = 1.0,
                             alignment: str = "same_time", timing: str = "raw", backend: str = "auto",
                             chunk_size: int = 64, initial_state: FastWeightState | Tensor | None = None,
                             output_final_state: bool = False) -> tuple[Tensor, FastWeightState | None]:
    """``falcon_lab.kernels.linear_attention`` with the fused backend besides (same arguments; ``backend`` one of
    ``BACKENDS``). Returns (o in q's dtype, the final state or None)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}; accepted: {', '.join(BACKENDS)}")
    stateless = initial_state is None and not output_final_state
    if backend in ("auto", "triton"):
        if not (stateless and takes_kernels(q, v, backend, chunk_size)):
            backend = "chunk"
    if backend != "auto" and backend != "triton":
        return linear_attention(q, k, v, g, scale=scale, alignment=alignment, timing=timing, backend=backend,
                                chunk_size=chunk_size, initial_state=initial_state,
                                output_final_state=output_final_state)
    return _fused(q, k, v, g, scale, alignment, timing, chunk_size), None


def takes_kernels(q: Tensor, v: Tensor, backend: str, chunk_size: int) -> bool:
    """Whether a fresh call with no state out runs on the kernels: ``"triton"`` always (refusing, by name, what
    they cannot take), ``"auto"`` where they take bf16 or fp16 inputs."""
    if backend not in ("auto", "triton"):
        return False
    refusal = fused_refusal(q, v, chunk_size)
    if backend == "triton" and refusal:
        raise ValueError(refusal)
    return refusal is None and (backend == "triton" or (q.is_cuda and q.dtype in HALF))


def decayed_over_samples(q: Tensor, k: Tensor, v: Tensor, g: Tensor, samples: Tensor, *, scale: float = 1.0,
                         alignment: str = "same_time", timing: str = "raw", backend: str = "auto",
                         chunk_size: int = 64, sample_ids: bool | None = None) -> Tensor:
    """Decayed linear attention restarting at every sample of packed rows (``samples [B, L]``, non-decreasing along
    each row, inputs ``[B, L, ...]``), each sample a fresh sequence. On the kernels the samples are the packed
    sequences of one row of B·L tokens (``cu_seqlens``: no padding), or with ``sample_ids`` (None:
    ``layers.SAMPLE_IDS``)
    the rows as they are in full chunks of ``chunk_size``, told apart by ``samples`` itself; on the other forms
    they are laid one to a row, padded at their ends. Returns o ``[B, L, H, Dv]`` in q's dtype."""
    if takes_kernels(q, v, backend, chunk_size):
        if layers.SAMPLE_IDS if sample_ids is None else sample_ids:
            return _fused(q, k, v, g, scale, alignment, timing, chunk_size, sample_id=samples)
        return _fused_over_samples(q, k, v, g, samples, scale, alignment, timing, chunk_size)
    rows = SampleRows(samples)
    o, _ = decayed_linear_attention(*(rows.apart(t) for t in (q, k, v, g)), scale=scale, alignment=alignment,
                                    timing=timing, backend="chunk" if backend in ("auto", "triton") else backend,
                                    chunk_size=rows.chunk(chunk_size))
    return rows.back(o)


@torch.compiler.disable
def _fused_over_samples(q: Tensor, k: Tensor, v: Tensor, g: Tensor, samples: Tensor, scale: float, alignment: str,
                        timing: str, chunk_size: int) -> Tensor:
    """The samples of packed rows as the packed sequences of one row of B·L tokens on the kernels, chunked as their
    padded rows would be; its host syncs (the samples' bounds, the longest) stay outside torch.compile's graph."""
    bounds = sample_bounds(samples)
    chunk = packed_chunk(bounds, chunk_size) if q.is_cuda else chunk_for(packed.longest(bounds), chunk_size)
    flat = (t.flatten(0, 1)[None] for t in (q, k, v, g))
    return _fused(*flat, scale, alignment, timing, chunk, bounds)[0].unflatten(0, samples.shape)


@torch.compiler.disable
def _fused(q: Tensor, k: Tensor, v: Tensor, g: Tensor, scale: float, alignment: str, timing: str,
           chunk_size: int, cu_seqlens: Tensor | None = None, sample_id: Tensor | None = None) -> Tensor:
    """Fresh sequences on falcon-1a's kernels (η = 1, log γ = g, S0 = 0), packed along T of a batch of one with
    ``cu_seqlens``, or the samples of each row told apart by ``sample_id [B, T]``: o in q's dtype."""
    if alignment == "shifted":  # a fresh sequence: its first token writes nothing
        k = torch.cat([torch.zeros_like(k[:, :1]), k[:, :-1]], dim=1)
        if cu_seqlens is not None:
            k[:, cu_seqlens[:-1].long()] = 0
        if sample_id is not None:
            k = k.masked_fill(sample_starts(sample_id).view(sample_id.shape)[..., None, None], 0)
    B, T, H, Dk = q.shape
    N = B if cu_seqlens is None else cu_seqlens.numel() - 1
    dtype = q.dtype
    S0 = torch.zeros(N, H, Dk, v.shape[-1], dtype=torch.float32, device=q.device)
    eta = torch.ones(B, T, H, dtype=torch.float32, device=q.device)
    o, _ = decayed_attention(q * scale, k.to(dtype), v.to(dtype), eta, g.float(), S0, raw=timing == "raw",
                             chunk_size=chunk_size, cu_seqlens=cu_seqlens, sample_id=sample_id)
    return o.to(dtype)
