"""The one module of Triton helpers every kernel folder uses: buffers, packed-sequence tables, where a chunk's
tokens lie, the write pairs, the gates η and log γ, and the matmul at a chosen precision.

Token rows are flat: token t of sequence n is row ``bos_n + t`` of ``[rows, H, D]`` tensors, with
``bos_n = n T`` for a batch and ``cu_seqlens[n]`` for packed sequences. Packed sequences are split into chunks
per sequence, as fla does: one program per chunk, each knowing its sequence and its chunk number inside it.

Every kernel fuses the same per-token front end: the write feature x_t (``k_{t−1}`` shifted, ``k_t`` same
time; the first shifted pair reads the state's last key, or is no pair on a fresh sequence), the step size
η_t = β_t / (‖x_t‖² + λ_t + ε) (the η given itself without normalisation; λ_t = λ̄_t ‖x_t‖² with the
scale-coupled ridge), and the carry's log g_t = log(1 − min(η_t λ_t, 1 − ε_γ)) ≤ 0.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from falcon_lab.kernels.common import packed


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n (and >= 16, the least size ``tl.dot`` accepts)."""
    return max(16, 1 << (max(n, 1) - 1).bit_length())


def new_buffer(*shape: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """Every buffer the kernels fill is made here (called as ``triton_helpers.new_buffer``), so tests can poison
    them (NaN) to catch unwritten rows."""
    return torch.empty(*shape, dtype=dtype, device=device)


def chunk_table(cu_seqlens: Tensor, chunk_size: int) -> tuple[Tensor, Tensor]:
    """Chunk indices of packed sequences.

    Returns ``chunk_indices`` ``[NT, 2]`` int32 (sequence n, chunk c inside it) for every chunk of every
    sequence in order, and ``chunk_offsets`` ``[N + 1]`` int32: the first chunk of sequence n is row
    ``chunk_offsets[n]``. A sequence of length L has ``ceil(L / chunk_size)`` chunks, the last one short.
    """
    return packed.memo(cu_seqlens, ("chunk_table", chunk_size), lambda: _chunk_table(cu_seqlens, chunk_size))


def _chunk_table(cu_seqlens: Tensor, chunk_size: int) -> tuple[Tensor, Tensor]:
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).long()
    n_chunks = (lengths + chunk_size - 1) // chunk_size
    chunk_offsets = torch.zeros(n_chunks.numel() + 1, dtype=torch.long, device=cu_seqlens.device)
    chunk_offsets[1:] = torch.cumsum(n_chunks, 0)
    total = packed.chunk_count(cu_seqlens, chunk_size)  # read on the host once per cu_seqlens (falcon_lab.kernels.common.packed)
    seq = torch.repeat_interleave(torch.arange(n_chunks.numel(), device=cu_seqlens.device), n_chunks,
                                  output_size=total)
    within = torch.arange(total, device=cu_seqlens.device) - chunk_offsets[seq]
    return torch.stack([seq, within], 1).to(torch.int32).contiguous(), chunk_offsets.to(torch.int32)


@triton.jit
def seq_bounds(i_n, cu_ptr, T, IS_VARLEN: tl.constexpr):
    """First row and length of sequence ``i_n``."""
    if IS_VARLEN:
        bos = tl.load(cu_ptr + i_n).to(tl.int32)
        eos = tl.load(cu_ptr + i_n + 1).to(tl.int32)
    else:
        bos = i_n * T
        eos = bos + T
    return bos, eos - bos


@triton.jit
def first_chunk(i_n, coff_ptr, T, C: tl.constexpr, IS_VARLEN: tl.constexpr):
    """Index of sequence ``i_n``'s first chunk among the whole batch's chunks of ``C`` rows."""
    if IS_VARLEN:
        base = tl.load(coff_ptr + i_n).to(tl.int32)
    else:
        base = i_n * tl.cdiv(T, C)
    return base


@triton.jit
def chunk_of(pid, cidx_ptr, NT, IS_VARLEN: tl.constexpr):
    """(sequence, chunk within it) of the ``pid``-th chunk of the whole batch."""
    if IS_VARLEN:
        i_n = tl.load(cidx_ptr + 2 * pid).to(tl.int32)
        i_c = tl.load(cidx_ptr + 2 * pid + 1).to(tl.int32)
    else:
        i_n = pid // NT
        i_c = pid % NT
    return i_n, i_c


@triton.jit
def chunk_at(pid, cidx_ptr, cu_ptr, coff_ptr, T, NT, C: tl.constexpr, IS_VARLEN: tl.constexpr):
    """The ``pid``-th chunk of the whole batch: its sequence n, its chunk c inside n, n's first row and length,
    and the index of n's first chunk among the batch's chunks."""
    i_n, i_c = chunk_of(pid, cidx_ptr, NT, IS_VARLEN)
    bos, T_n = seq_bounds(i_n, cu_ptr, T, IS_VARLEN)
    return i_n, i_c, bos, T_n, first_chunk(i_n, coff_ptr, T, C, IS_VARLEN)


@triton.jit
def state_tile(i_k, i_v, i_nh, cu_ptr, coff_ptr, T, H, Dk: tl.constexpr, Dv: tl.constexpr, C: tl.constexpr,
               BK: tl.constexpr, BV: tl.constexpr, IS_VARLEN: tl.constexpr):
    """Where a program of a pass along one sequence works: it holds key block ``i_k`` and value block ``i_v`` of
    the ``[Dk, Dv]`` state of sequence n and head h, ``i_nh = n H + h``. Returns n, h, the sequence's first row
    and length, the index of its first chunk (of C tokens) among the batch's, the block's key and value columns,
    its mask and its offsets in the state."""
    i_n, i_h = i_nh // H, i_nh % H
    bos, T_n = seq_bounds(i_n, cu_ptr, T, IS_VARLEN)
    first = first_chunk(i_n, coff_ptr, T, C, IS_VARLEN)
    offs_k = i_k * BK + tl.arange(0, BK)
    offs_v = i_v * BV + tl.arange(0, BV)
    m_kv = (offs_k < Dk)[:, None] & (offs_v < Dv)[None, :]
    return i_n, i_h, bos, T_n, first, offs_k, offs_v, m_kv, offs_k[:, None] * Dv + offs_v[None, :]


@triton.jit
def load_rows(ptr, bos, i_h, t, T_n, col, H, D: tl.constexpr):
    """``[len(t), len(col)]`` of a ``[rows, H, D]`` tensor at local tokens ``t`` of the sequence starting at row
    ``bos``; tokens outside [0, T_n) and columns >= D read 0."""
    m = ((t >= 0) & (t < T_n))[:, None] & (col < D)[None, :]
    return tl.load(ptr + ((bos + t)[:, None] * H + i_h) * D + col[None, :], mask=m, other=0.0)


@triton.jit
def store_rows(ptr, val, bos, i_h, t, T_n, col, H, D: tl.constexpr):
    """Write ``val`` where ``load_rows`` reads, in the tensor's dtype; tokens outside [0, T_n) are not written."""
    m = ((t >= 0) & (t < T_n))[:, None] & (col < D)[None, :]
    tl.store(ptr + ((bos + t)[:, None] * H + i_h) * D + col[None, :], val.to(ptr.dtype.element_ty), mask=m)


@triton.jit
def put_rows(ptr, val, bos, i_h, t, T_n, col, H, D: tl.constexpr, ACC: tl.constexpr):
    """``store_rows``, or with ``ACC`` ``val`` added to what the rows hold (float32 sum, one rounding to the tensor's
    dtype): the caller's program is the only one to write these rows."""
    if ACC:
        val = val + load_rows(ptr, bos, i_h, t, T_n, col, H, D).to(tl.float32)
    store_rows(ptr, val, bos, i_h, t, T_n, col, H, D)


@triton.jit
def load_pairs(k_ptr, lk_ptr, bos, t, T_n, i_n, i_h, offs_k, H, Dk: tl.constexpr, SHIFTED: tl.constexpr, FRESH):
    """The write features x_t of local tokens ``t`` (``[BT]``) in columns ``offs_k``, as fp32 ``[BT, BK]``; 0 for
    tokens outside [0, T_n).

    Shifted: x_t = k_{t−1}; the first token of a sequence reads the state's last key, or 0 when fresh."""
    if SHIFTED:
        x = load_rows(k_ptr, bos, i_h, tl.where(t < T_n, t - 1, -1), T_n, offs_k, H, Dk).to(tl.float32)
        if not FRESH:
            lk = tl.load(lk_ptr + (i_n * H + i_h) * Dk + offs_k, mask=offs_k < Dk, other=0.0).to(tl.float32)
            x = tl.where((t == 0)[:, None], lk[None, :], x)
    else:
        x = load_rows(k_ptr, bos, i_h, t, T_n, offs_k, H, Dk).to(tl.float32)
    return x


@triton.jit
def is_pair(t, valid, SHIFTED: tl.constexpr, FRESH):
    """Real pairs: every valid token but the first one of a fresh shifted sequence."""
    pair = valid
    if SHIFTED:
        if FRESH:  # a constexpr in some kernels, a runtime flag in others
            pair = valid & (t > 0)
    return pair


@triton.jit
def gates(beta, lam, energy, pair, eps, floor, NORMALIZE: tl.constexpr, COUPLED: tl.constexpr):
    """η and g = log γ for tiles of gains ``beta``, ridges ``lam`` and energies ‖x‖² (broadcastable)."""
    if COUPLED:
        lam = lam * energy
    if NORMALIZE:
        denom = energy + lam + eps
        pos = denom > 0
        eta = tl.where(pos, beta / tl.where(pos, denom, 1.0), 0.0)
    else:
        eta = beta
    eta = tl.where(pair, eta, 0.0)
    alpha = tl.minimum(eta * lam, 1.0 - floor)
    return eta, tl.log(1.0 - alpha)


@triton.jit
def gates_grad(beta, lam, energy, pair, deta, dg, eps, floor, NORMALIZE: tl.constexpr, COUPLED: tl.constexpr):
    """The gradients of ``gates`` w.r.t. beta, lam (λ̄ when coupled) and the energy, given dη and dg."""
    lam_eff = lam
    if COUPLED:
        lam_eff = lam * energy
    if NORMALIZE:
        denom = energy + lam_eff + eps
        pos = denom > 0
        inv = 1.0 / tl.where(pos, denom, 1.0)
        eta = tl.where(pair & pos, beta * inv, 0.0)
    else:
        eta = tl.where(pair, beta, 0.0)
    alpha_raw = eta * lam_eff
    alpha = tl.minimum(alpha_raw, 1.0 - floor)
    # the clamp passes no gradient where it bites (torch.clamp passes it at equality, as here)
    dalpha = tl.where(alpha_raw <= 1.0 - floor, -dg / (1.0 - alpha), 0.0)
    deta_all = deta + dalpha * lam_eff
    dlam = dalpha * eta
    if NORMALIZE:
        live = pair & pos
        dbeta = tl.where(live, deta_all * inv, 0.0)
        ddenom = tl.where(live, -deta_all * eta * inv, 0.0)
        dlam += ddenom
        denergy = ddenom
    else:
        dbeta = tl.where(pair, deta_all, 0.0)
        denergy = tl.zeros_like(dbeta)
    if COUPLED:
        denergy += dlam * lam
        dlam = dlam * energy
    return dbeta, dlam, denergy


@triton.jit
def rev_cumsum(x):
    """Σ_{r ≥ t} x_r along axis 0 (inclusive), for ``[BT]`` or ``[BT, BV]`` tiles."""
    return tl.sum(x, 0, keep_dims=True) - tl.cumsum(x, 0) + x


@triton.jit
def mm(a, b, PREC: tl.constexpr):
    """A matmul with fp32 accumulation. ``PREC``: ``"bf16"`` or ``"fp16"`` rounds the operands to that half type;
    ``"ieee"``, ``"tf32x3"`` or ``"tf32"`` multiplies fp32 operands at that input precision."""
    if PREC == "bf16":
        return tl.dot(a.to(tl.bfloat16), b.to(tl.bfloat16))
    elif PREC == "fp16":
        return tl.dot(a.to(tl.float16), b.to(tl.float16))
    else:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision=PREC)


# Rows of samples told apart by a per-token sample id (``sample_id [B, T]`` int32, non-decreasing along a row; a new
# id opens a sample whose state starts at zero): the kernels run the rows as they are, in full chunks, and these
# give each chunk its samples. A token reads and corrects against the state the chunk carries in only if it shares
# the id of the token before the chunk (the row's first chunk: its first id, whose sample starts from the initial
# state); the pair products inside a chunk are masked to pairs of one sample.


@triton.jit
def chunk_samples(sid_ptr, i_n, i_c, t, T, C: tl.constexpr):
    """For chunk ``i_c`` of row ``i_n`` (local tokens ``t``): each token's sample id (tokens past the row's end take
    its last id: the padding joins the last sample, where g = 0), the id of the sample the carried state belongs to,
    the id of the chunk's last token, and whether each token opens a sample."""
    row = sid_ptr + i_n * T
    at = tl.minimum(t, T - 1)
    sid = tl.load(row + at)
    prev = tl.load(row + tl.maximum(i_c * C - 1, 0))
    last = tl.load(row + tl.minimum(i_c * C + C - 1, T - 1))
    opens = (t > 0) & (t < T) & (sid != tl.load(row + tl.maximum(at - 1, 0)))
    return sid, prev, last, opens


@triton.jit
def cut_pairs(x, opens, SHIFTED: tl.constexpr):
    """Shifted pairs x_t = k_{t−1}: the first token of a sample writes nothing (its x is 0; ``pair_apart``)."""
    if SHIFTED:
        x = tl.where(opens[:, None], 0.0, x)
    return x


@triton.jit
def pair_apart(pair, opens, SHIFTED: tl.constexpr):
    """Real pairs of rows of samples: shifted, no token that opens a sample is one."""
    if SHIFTED:
        pair = pair & (opens == 0)
    return pair


@triton.jit
def sample_cumsum(x, sid, r):
    """Σ_{s ≤ t, s in t's sample} x_s along axis 0 of a ``[C]`` tile (r = arange(C)): the chunk-local prefix of
    each sample, so that every decay ratio the kernels form is a difference of two prefixes of one sample."""
    m = (r[:, None] >= r[None, :]) & (sid[:, None] == sid[None, :])
    return tl.sum(tl.where(m, x[None, :], 0.0), 1)


@triton.jit
def sample_rev_cumsum(x, sid, r):
    """Σ_{s ≥ t, s in t's sample} x_s along axis 0 of a ``[C]`` tile: ``sample_cumsum``'s transpose."""
    m = (r[None, :] >= r[:, None]) & (sid[:, None] == sid[None, :])
    return tl.sum(tl.where(m, x[None, :], 0.0), 1)
