"""``backend="triton"`` for the inner-product rules falcon-1a and falcon-2a: chunked decayed linear attention.

    S_t = γ_t S_{t−1} + η_t x_t y_tᵀ  (falcon-1a; for falcon-2a η_{t,j}, γ_{t,j} act on value column j)

The kernels take q, k, v, beta, lam in their own dtype and fuse the pairing (x_t = k_{t−1} shifted, the
state's last key at a sequence start), η = β / (‖x‖² + λ + ε), the clamp α = min(ηλ, 1 − ε_γ), γ = 1 − α and
the chunk-local cumulative log-carries G. With G_t the sum of log γ over the chunk up to t and r(t) the
state a read sees (t for RAW, t − 1 for RBW):

    o_t = e^{G_r(t)} ⊙ (h_cᵀ q_t) + Σ_{s ≤ r(t), s in chunk} (q_t·x_s) e^{G_r(t) − G_s} ⊙ η_s ⊙ y_s

with h_c the state before chunk c. For falcon-2a the carry differs per value column, so the intra-chunk
sum is split into 16-token blocks: earlier blocks factor through the token before the block (both factors
≤ 1) and the diagonal block through its midpoint (factors ≤ e^{8|log ε_γ|}, hence ``decay_floor`` ≥ 1e-3).

Backward (same chunking): dh runs backwards over chunks, then per chunk dv' = D_tᵀ x_t (v' = η ⊙ v),
dq = S_r(t) do_t, dx = D_t v'_t, and the carries' gradient from the chunk-local identity
dG_τ = o_τ' ⊙ do_τ' − v'_τ ⊙ dv'_τ (+ dh_end ⊙ S_end summed over keys at the chunk's last token), whose
reverse cumulative sum within the chunk is d log γ.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl
from torch import Tensor

from kernels.falcon.config import RuleConfig
from kernels.falcon.state import FastWeightState
from kernels.falcon.triton_common import chunk_table, interpreting, next_power_of_2

SUB = 16  # falcon-2a's intra-chunk block: the midpoint factors stay below e^{8 |log ε_γ|}
MIN_DECAY_FLOOR_PER_CHANNEL = 1e-3
CHUNK_SIZES = (16, 32, 64, 128)
NEG_INF = tl.constexpr(float("-inf"))  # kernels may read only constexpr globals


def _alloc(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> Tensor:
    """Every buffer the kernels write (tests replace this with a NaN-filled allocation)."""
    return torch.empty(shape, dtype=dtype, device=device)


# ---------------------------------------------------------------- device helpers


@triton.jit
def _seq(i_t, i_b, cu_seqlens, chunk_indices, chunk_offsets, T, NT, IS_VARLEN: tl.constexpr):
    """Sequence n, chunk c inside it, first token, length, first h slot and global chunk row of program i_t."""
    if IS_VARLEN:
        i_n = tl.load(chunk_indices + i_t * 2).to(tl.int32)
        i_c = tl.load(chunk_indices + i_t * 2 + 1).to(tl.int32)
        bos = tl.load(cu_seqlens + i_n).to(tl.int32)
        L = tl.load(cu_seqlens + i_n + 1).to(tl.int32) - bos
        first = tl.load(chunk_offsets + i_n).to(tl.int32)
    else:
        i_n = i_b
        i_c = i_t
        bos = i_b * T
        L = T
        first = i_b * NT
    return i_n, i_c, bos, L, first + i_n, first + i_c


@triton.jit
def _seq_n(i_n, cu_seqlens, chunk_offsets, T, NT, IS_VARLEN: tl.constexpr):
    """First token, length, first h slot and first global chunk row of sequence n."""
    if IS_VARLEN:
        bos = tl.load(cu_seqlens + i_n).to(tl.int32)
        L = tl.load(cu_seqlens + i_n + 1).to(tl.int32) - bos
        first = tl.load(chunk_offsets + i_n).to(tl.int32)
    else:
        bos = i_n * T
        L = T
        first = i_n * NT
    return bos, L, first + i_n, first


@triton.jit
def _dot(a, b, PREC: tl.constexpr):
    return tl.dot(a, b, input_precision=PREC)


@triton.jit
def _rows(ptr, bos, i_h, t, L, col, H, D: tl.constexpr):
    """``[len(t), len(col)]`` of a ``[tokens, H, D]`` tensor; rows outside [0, L) and columns >= D read 0."""
    m = ((t >= 0) & (t < L))[:, None] & (col < D)[None, :]
    return tl.load(ptr + ((bos + t)[:, None] * H + i_h) * D + col[None, :], mask=m, other=0.0)


@triton.jit
def _store_rows(ptr, val, bos, i_h, t, L, col, H, D: tl.constexpr):
    m = ((t >= 0) & (t < L))[:, None] & (col < D)[None, :]
    tl.store(ptr + ((bos + t)[:, None] * H + i_h) * D + col[None, :], val.to(ptr.dtype.element_ty), mask=m)


@triton.jit
def _load_x(k, last_key, i_n, i_h, bos, t, L, d, H, K: tl.constexpr, SHIFTED: tl.constexpr,
            FRESH):
    """Write features x_t: k_{t−1} (shifted; the state's last key at t = 0, or 0 on a fresh sequence) or k_t."""
    if SHIFTED:
        x = _rows(k, bos, i_h, t - 1, L, d, H, K)
        if not FRESH:
            lk = tl.load(last_key + (i_n * H + i_h) * K + d, mask=d < K, other=0.0).to(x.dtype)
            x = tl.where((t == 0)[:, None], lk[None, :], x)
    else:
        x = _rows(k, bos, i_h, t, L, d, H, K)
    return x


@triton.jit
def _gates(G, bos, i_h, t, L, j, H, V: tl.constexpr, PER_CHANNEL: tl.constexpr):
    """Chunk-local cumulative log-carries at tokens t (``[len(t)]``, or ``[len(t), len(j)]`` per channel).
    Tokens past the end repeat the last one: they carry γ = 1."""
    tc = tl.minimum(t, L - 1)
    if PER_CHANNEL:
        return tl.load(G + ((bos + tc)[:, None] * H + i_h) * V + j[None, :], mask=(j < V)[None, :], other=0.0)
    else:
        return tl.load(G + (bos + tc) * H + i_h)


@triton.jit
def _gate_at(G, bos, i_h, idx, L, j, H, V: tl.constexpr, PER_CHANNEL: tl.constexpr):
    """The cumulative log-carry at one token (a scalar, or ``[len(j)]`` per channel)."""
    ic = tl.minimum(idx, L - 1)
    if PER_CHANNEL:
        return tl.load(G + ((bos + ic) * H + i_h) * V + j, mask=j < V, other=0.0)
    else:
        return tl.load(G + (bos + ic) * H + i_h)


@triton.jit
def _read_gates(G, bos, i_h, t, t0, L, j, H, V: tl.constexpr, RAW: tl.constexpr,
                PER_CHANNEL: tl.constexpr):
    """G_{r(t)}: through t (RAW) or through t − 1 (RBW; 0 at the chunk's first token, which reads h_c)."""
    if RAW:
        g = _gates(G, bos, i_h, t, L, j, H, V, PER_CHANNEL)
    else:
        g = _gates(G, bos, i_h, tl.maximum(t - 1, t0), L, j, H, V, PER_CHANNEL)
        if PER_CHANNEL:
            g = tl.where((t == t0)[:, None], 0.0, g)
        else:
            g = tl.where(t == t0, 0.0, g)
    return g


@triton.jit
def _sees(reader, source, RAW: tl.constexpr):
    """``[len(reader), len(source)]``: whether the read at ``reader`` sees the write at ``source``."""
    if RAW:
        return source[None, :] <= reader[:, None]
    else:
        return source[None, :] < reader[:, None]


@triton.jit
def _seen_by(source, reader, RAW: tl.constexpr):
    """``[len(source), len(reader)]``: whether the read at ``reader`` sees the write at ``source``."""
    if RAW:
        return reader[None, :] >= source[:, None]
    else:
        return reader[None, :] > source[:, None]


@triton.jit
def _outputs(qh, A, Gr, Gc, ec, vc, G, bos, i_h, tr, tc, b0, t0, L, j, H, V: tl.constexpr,
             BR: tl.constexpr, RAW: tl.constexpr, PER_CHANNEL: tl.constexpr, DT: tl.constexpr,
             PREC: tl.constexpr):
    """o at reader rows tr from qh = q h_c and the scores A = q xᵀ over the chunk's sources tc."""
    if PER_CHANNEL:
        ve = vc * ec
        # sources in earlier blocks, through the token before this block: e^{G_r − G_ref} e^{G_ref − G_s}
        Gref = _gate_at(G, bos, i_h, tl.maximum(b0 - 1, t0), L, j, H, V, PER_CHANNEL)
        before = (tc < b0)[:, None]
        v_off = ve * tl.exp(tl.where(before, Gref[None, :] - Gc, NEG_INF))
        out = _dot(A.to(DT), v_off.to(DT), PREC) * tl.exp(tl.where(b0 > t0, Gr - Gref[None, :], NEG_INF))
        # sources in this block, through its midpoint
        Gm = _gate_at(G, bos, i_h, b0 + BR // 2 - 1, L, j, H, V, PER_CHANNEL)
        inblk = (tc >= b0) & (tc < b0 + BR)
        v_d = tl.where(inblk[:, None], ve * tl.exp(tl.where(inblk[:, None], Gm[None, :] - Gc, 0.0)), 0.0)
        A_d = tl.where(_sees(tr, tc, RAW) & inblk[None, :], A, 0.0)
        out += _dot(A_d.to(DT), v_d.to(DT), PREC) * tl.exp(Gr - Gm[None, :])
        out += qh * tl.exp(Gr)
    else:
        dec = tl.exp(tl.where(_sees(tr, tc, RAW), Gr[:, None] - Gc[None, :], NEG_INF))
        out = qh * tl.exp(Gr)[:, None] + _dot((A * dec * ec[None, :]).to(DT), vc.to(DT), PREC)
    return out


@triton.jit
def _source_grads(xdh, At, Gs, Grc, Gl, doc, G, bos, i_h, ts, tc, b0, L, j, H,
                  V: tl.constexpr, BR: tl.constexpr, RAW: tl.constexpr, PER_CHANNEL: tl.constexpr,
                  DT: tl.constexpr, PREC: tl.constexpr):
    """dv' = Dᵀx at source rows ts from xdh = x dh_end and At = x qᵀ over the chunk's readers tc."""
    if PER_CHANNEL:
        # readers in later blocks, through this block's last token
        Ge = _gate_at(G, bos, i_h, b0 + BR - 1, L, j, H, V, PER_CHANNEL)
        after = (tc >= b0 + BR)[:, None]
        do_off = doc * tl.exp(tl.where(after, Grc - Ge[None, :], NEG_INF))
        out = _dot(At.to(DT), do_off.to(DT), PREC) * tl.exp(Ge[None, :] - Gs)
        # readers in this block, through its midpoint
        Gm = _gate_at(G, bos, i_h, b0 + BR // 2 - 1, L, j, H, V, PER_CHANNEL)
        inblk = (tc >= b0) & (tc < b0 + BR)
        do_d = tl.where(inblk[:, None], doc * tl.exp(tl.where(inblk[:, None], Grc - Gm[None, :], 0.0)), 0.0)
        At_d = tl.where(_seen_by(ts, tc, RAW) & inblk[None, :], At, 0.0)
        out += _dot(At_d.to(DT), do_d.to(DT), PREC) * tl.exp(Gm[None, :] - Gs)
        out += xdh * tl.exp(Gl[None, :] - Gs)
    else:
        dec = tl.exp(tl.where(_seen_by(ts, tc, RAW), Grc[None, :] - Gs[:, None], NEG_INF))
        out = xdh * tl.exp(Gl - Gs)[:, None] + _dot((At * dec).to(DT), doc.to(DT), PREC)
    return out


# ---------------------------------------------------------------- forward kernels


@triton.jit
def _prep_kernel(k, last_key, beta, lam, eta, G, cu_seqlens, chunk_indices, chunk_offsets, eps, floor, T, NT,
                 H, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
                 BV: tl.constexpr, SHIFTED: tl.constexpr, FRESH, PER_CHANNEL: tl.constexpr,
                 NORMALIZE: tl.constexpr, SCALE_RIDGE: tl.constexpr, IS_VARLEN: tl.constexpr):
    """η and the chunk-local cumulative log-carry G of every token of one chunk."""
    i_t, i_bh = tl.program_id(0), tl.program_id(1)
    i_b, i_h = i_bh // H, i_bh % H
    i_n, i_c, bos, L, _, _ = _seq(i_t, i_b, cu_seqlens, chunk_indices, chunk_offsets, T, NT, IS_VARLEN)
    t = i_c * BT + tl.arange(0, BT)
    rm = t < L
    energy = tl.zeros([BT], dtype=tl.float32)
    for i_k in range(tl.cdiv(K, BK)):
        d = i_k * BK + tl.arange(0, BK)
        x = _load_x(k, last_key, i_n, i_h, bos, t, L, d, H, K, SHIFTED, FRESH).to(tl.float32)
        energy += tl.sum(x * x, 1)
    valid = rm
    if SHIFTED and FRESH:
        valid = valid & (t > 0)  # x_1 = 0 of a fresh sequence is not a pair
    energy = tl.where(valid, energy, 0.0)
    lam_t = tl.load(lam + (bos + t) * H + i_h, mask=rm, other=0.0).to(tl.float32)
    if SCALE_RIDGE:
        lam_t = lam_t * energy
    den = energy + lam_t + eps
    pos = den > 0
    if PER_CHANNEL:
        for i_v in range(tl.cdiv(V, BV)):
            j = i_v * BV + tl.arange(0, BV)
            b = _rows(beta, bos, i_h, t, L, j, H, V).to(tl.float32)
            if NORMALIZE:
                e = tl.where(pos[:, None], b / tl.where(pos, den, 1.0)[:, None], 0.0)
            else:
                e = b
            e = tl.where(valid[:, None], e, 0.0)
            g = tl.log(1.0 - tl.minimum(e * lam_t[:, None], 1.0 - floor))
            _store_rows(eta, e, bos, i_h, t, L, j, H, V)
            _store_rows(G, tl.cumsum(g, 0), bos, i_h, t, L, j, H, V)
    else:
        b = tl.load(beta + (bos + t) * H + i_h, mask=rm, other=0.0).to(tl.float32)
        if NORMALIZE:
            e = tl.where(pos, b / tl.where(pos, den, 1.0), 0.0)
        else:
            e = b
        e = tl.where(valid, e, 0.0)
        g = tl.log(1.0 - tl.minimum(e * lam_t, 1.0 - floor))
        tl.store(eta + (bos + t) * H + i_h, e, mask=rm)
        tl.store(G + (bos + t) * H + i_h, tl.cumsum(g, 0), mask=rm)


@triton.jit
def _fwd_h_kernel(k, v, last_key, eta, G, S0, h, ST, cu_seqlens, chunk_offsets, T, NT, H,
                  K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
                  SHIFTED: tl.constexpr, FRESH, PER_CHANNEL: tl.constexpr,
                  IS_VARLEN: tl.constexpr, PREC: tl.constexpr):
    """The state before every chunk (h) and after the last one (ST), one (key block, value block) tile."""
    i_k, i_v, i_nh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_n, i_h = i_nh // H, i_nh % H
    bos, L, boh, _ = _seq_n(i_n, cu_seqlens, chunk_offsets, T, NT, IS_VARLEN)
    DT: tl.constexpr = k.dtype.element_ty
    d = i_k * BK + tl.arange(0, BK)
    j = i_v * BV + tl.arange(0, BV)
    tile = d[:, None] * V + j[None, :]
    tm = (d < K)[:, None] & (j < V)[None, :]
    S = tl.load(S0 + (i_n * H + i_h) * K * V + tile, mask=tm, other=0.0).to(tl.float32)
    for c in range(tl.cdiv(L, BT)):
        tl.store(h + ((boh + c) * H + i_h).to(tl.int64) * K * V + tile, S.to(h.dtype.element_ty), mask=tm)
        t = c * BT + tl.arange(0, BT)
        x = _load_x(k, last_key, i_n, i_h, bos, t, L, d, H, K, SHIFTED, FRESH).to(DT)
        vv = _rows(v, bos, i_h, t, L, j, H, V).to(tl.float32)
        last = tl.minimum(c * BT + BT, L) - 1
        Gt = _gates(G, bos, i_h, t, L, j, H, V, PER_CHANNEL)
        Gl = _gate_at(G, bos, i_h, last, L, j, H, V, PER_CHANNEL)
        if PER_CHANNEL:
            et = _rows(eta, bos, i_h, t, L, j, H, V)
            w = et * tl.exp(Gl[None, :] - Gt)
            S = S * tl.exp(Gl)[None, :] + _dot(tl.trans(x), (vv * w).to(DT), PREC)
        else:
            et = tl.load(eta + (bos + t) * H + i_h, mask=t < L, other=0.0)
            w = et * tl.exp(Gl - Gt)
            S = S * tl.exp(Gl) + _dot(tl.trans(x), (vv * w[:, None]).to(DT), PREC)
    tl.store(ST + (i_n * H + i_h) * K * V + tile, S, mask=tm)
    n_chunks = tl.cdiv(L, BT)
    tl.store(h + ((boh + n_chunks) * H + i_h).to(tl.int64) * K * V + tile, S.to(h.dtype.element_ty), mask=tm)


@triton.jit
def _fwd_o_kernel(q, k, v, last_key, eta, G, h, o, cu_seqlens, chunk_indices, chunk_offsets, T, NT,
                  H, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BR: tl.constexpr,
                  BK: tl.constexpr, BV: tl.constexpr, SHIFTED: tl.constexpr, FRESH,
                  RAW: tl.constexpr, PER_CHANNEL: tl.constexpr, IS_VARLEN: tl.constexpr, PREC: tl.constexpr):
    """Outputs of BR rows of one chunk, one value block."""
    i_v, i_tr, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_t, i_s = i_tr // (BT // BR), i_tr % (BT // BR)
    i_b, i_h = i_bh // H, i_bh % H
    i_n, i_c, bos, L, boh, _ = _seq(i_t, i_b, cu_seqlens, chunk_indices, chunk_offsets, T, NT, IS_VARLEN)
    DT: tl.constexpr = k.dtype.element_ty
    t0 = i_c * BT
    b0 = t0 + i_s * BR
    tr = b0 + tl.arange(0, BR)
    tc = t0 + tl.arange(0, BT)
    j = i_v * BV + tl.arange(0, BV)
    hc = h + ((boh + i_c) * H + i_h).to(tl.int64) * K * V
    qh = tl.zeros([BR, BV], dtype=tl.float32)
    A = tl.zeros([BR, BT], dtype=tl.float32)
    for i_k in range(tl.cdiv(K, BK)):
        d = i_k * BK + tl.arange(0, BK)
        qb = _rows(q, bos, i_h, tr, L, d, H, K).to(DT)
        xb = _load_x(k, last_key, i_n, i_h, bos, tc, L, d, H, K, SHIFTED, FRESH).to(DT)
        hb = tl.load(hc + d[:, None] * V + j[None, :], mask=(d < K)[:, None] & (j < V)[None, :], other=0.0)
        qh += _dot(qb, hb.to(DT), PREC)
        A += _dot(qb, tl.trans(xb), PREC)
    Gr = _read_gates(G, bos, i_h, tr, t0, L, j, H, V, RAW, PER_CHANNEL)
    Gc = _gates(G, bos, i_h, tc, L, j, H, V, PER_CHANNEL)
    vc = _rows(v, bos, i_h, tc, L, j, H, V).to(tl.float32)
    if PER_CHANNEL:
        ec = _rows(eta, bos, i_h, tc, L, j, H, V)
    else:
        ec = tl.load(eta + (bos + tc) * H + i_h, mask=tc < L, other=0.0)
    out = _outputs(qh, A, Gr, Gc, ec, vc, G, bos, i_h, tr, tc, b0, t0, L, j, H, V, BR, RAW, PER_CHANNEL, DT,
                   PREC)
    _store_rows(o, out, bos, i_h, tr, L, j, H, V)


# ---------------------------------------------------------------- backward kernels


@triton.jit
def _bwd_dh_kernel(q, do, G, h, dST, dhe, dS0, end, cu_seqlens, chunk_offsets, T, NT, NTT, H,
                   K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
                   RAW: tl.constexpr, PER_CHANNEL: tl.constexpr, IS_VARLEN: tl.constexpr, HAS_DST: tl.constexpr,
                   PREC: tl.constexpr):
    """Backwards over chunks: dhe[c] = ∂L/∂(state after chunk c), dS0, and Σ_keys dhe[c] ⊙ S_end(c)."""
    i_k, i_v, i_nh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_n, i_h = i_nh // H, i_nh % H
    bos, L, boh, first = _seq_n(i_n, cu_seqlens, chunk_offsets, T, NT, IS_VARLEN)
    DT: tl.constexpr = q.dtype.element_ty
    d = i_k * BK + tl.arange(0, BK)
    j = i_v * BV + tl.arange(0, BV)
    tile = d[:, None] * V + j[None, :]
    tm = (d < K)[:, None] & (j < V)[None, :]
    if HAS_DST:
        dS = tl.load(dST + (i_n * H + i_h) * K * V + tile, mask=tm, other=0.0).to(tl.float32)
    else:
        dS = tl.zeros([BK, BV], dtype=tl.float32)
    n_chunks = tl.cdiv(L, BT)
    for cc in range(n_chunks):
        c = n_chunks - 1 - cc
        S_end = tl.load(h + ((boh + c + 1) * H + i_h).to(tl.int64) * K * V + tile, mask=tm, other=0.0)
        tl.store(end + ((i_k * NTT + first + c) * H + i_h) * V + j, tl.sum(dS * S_end.to(tl.float32), 0),
                 mask=j < V)
        tl.store(dhe + ((first + c) * H + i_h).to(tl.int64) * K * V + tile, dS.to(dhe.dtype.element_ty), mask=tm)
        t0 = c * BT
        t = t0 + tl.arange(0, BT)
        qb = _rows(q, bos, i_h, t, L, d, H, K)
        dob = _rows(do, bos, i_h, t, L, j, H, V).to(tl.float32)
        Gr = _read_gates(G, bos, i_h, t, t0, L, j, H, V, RAW, PER_CHANNEL)
        Gl = _gate_at(G, bos, i_h, tl.minimum(t0 + BT, L) - 1, L, j, H, V, PER_CHANNEL)
        if PER_CHANNEL:
            dS = dS * tl.exp(Gl)[None, :] + _dot(tl.trans(qb.to(DT)), (dob * tl.exp(Gr)).to(DT), PREC)
        else:
            qg = (qb.to(tl.float32) * tl.exp(Gr)[:, None]).to(DT)
            dS = dS * tl.exp(Gl) + _dot(tl.trans(qg), dob.to(DT), PREC)
    tl.store(dS0 + (i_n * H + i_h) * K * V + tile, dS, mask=tm)


@triton.jit
def _bwd_dv_kernel(q, k, v, last_key, eta, G, h, dhe, do, dv, P, deta, cu_seqlens, chunk_indices, chunk_offsets,
                   T, NT, H, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BR: tl.constexpr,
                   BK: tl.constexpr, BV: tl.constexpr, NV: tl.constexpr, SHIFTED: tl.constexpr,
                   FRESH, RAW: tl.constexpr, PER_CHANNEL: tl.constexpr, IS_VARLEN: tl.constexpr,
                   PREC: tl.constexpr):
    """For BR rows of one chunk, one value block: dv = η ⊙ dv', the recomputed o ⊙ do (P) and v ⊙ dv' (deta)."""
    i_v, i_tr, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_t, i_s = i_tr // (BT // BR), i_tr % (BT // BR)
    i_b, i_h = i_bh // H, i_bh % H
    i_n, i_c, bos, L, boh, gch = _seq(i_t, i_b, cu_seqlens, chunk_indices, chunk_offsets, T, NT, IS_VARLEN)
    DT: tl.constexpr = k.dtype.element_ty
    t0 = i_c * BT
    b0 = t0 + i_s * BR
    tr = b0 + tl.arange(0, BR)
    tc = t0 + tl.arange(0, BT)
    j = i_v * BV + tl.arange(0, BV)
    hc = h + ((boh + i_c) * H + i_h).to(tl.int64) * K * V
    dhc = dhe + (gch * H + i_h).to(tl.int64) * K * V
    qh = tl.zeros([BR, BV], dtype=tl.float32)
    xdh = tl.zeros([BR, BV], dtype=tl.float32)
    A = tl.zeros([BR, BT], dtype=tl.float32)  # q_r · x_c: rows read, columns write
    At = tl.zeros([BR, BT], dtype=tl.float32)  # x_r · q_c: rows write, columns read
    for i_k in range(tl.cdiv(K, BK)):
        d = i_k * BK + tl.arange(0, BK)
        tm = (d < K)[:, None] & (j < V)[None, :]
        q_r = _rows(q, bos, i_h, tr, L, d, H, K).to(DT)
        x_r = _load_x(k, last_key, i_n, i_h, bos, tr, L, d, H, K, SHIFTED, FRESH).to(DT)
        q_c = _rows(q, bos, i_h, tc, L, d, H, K).to(DT)
        x_c = _load_x(k, last_key, i_n, i_h, bos, tc, L, d, H, K, SHIFTED, FRESH).to(DT)
        hb = tl.load(hc + d[:, None] * V + j[None, :], mask=tm, other=0.0).to(DT)
        dhb = tl.load(dhc + d[:, None] * V + j[None, :], mask=tm, other=0.0).to(DT)
        qh += _dot(q_r, hb, PREC)
        A += _dot(q_r, tl.trans(x_c), PREC)
        xdh += _dot(x_r, dhb, PREC)
        At += _dot(x_r, tl.trans(q_c), PREC)
    Gr_r = _read_gates(G, bos, i_h, tr, t0, L, j, H, V, RAW, PER_CHANNEL)
    Gr_c = _read_gates(G, bos, i_h, tc, t0, L, j, H, V, RAW, PER_CHANNEL)
    G_r = _gates(G, bos, i_h, tr, L, j, H, V, PER_CHANNEL)
    G_c = _gates(G, bos, i_h, tc, L, j, H, V, PER_CHANNEL)
    Gl = _gate_at(G, bos, i_h, tl.minimum(t0 + BT, L) - 1, L, j, H, V, PER_CHANNEL)
    v_r = _rows(v, bos, i_h, tr, L, j, H, V).to(tl.float32)
    v_c = _rows(v, bos, i_h, tc, L, j, H, V).to(tl.float32)
    do_r = _rows(do, bos, i_h, tr, L, j, H, V).to(tl.float32)
    do_c = _rows(do, bos, i_h, tc, L, j, H, V).to(tl.float32)
    if PER_CHANNEL:
        e_r = _rows(eta, bos, i_h, tr, L, j, H, V)
        e_c = _rows(eta, bos, i_h, tc, L, j, H, V)
    else:
        e_r = tl.load(eta + (bos + tr) * H + i_h, mask=tr < L, other=0.0)
        e_c = tl.load(eta + (bos + tc) * H + i_h, mask=tc < L, other=0.0)
    o_r = _outputs(qh, A, Gr_r, G_c, e_c, v_c, G, bos, i_h, tr, tc, b0, t0, L, j, H, V, BR, RAW, PER_CHANNEL,
                   DT, PREC)
    dvp = _source_grads(xdh, At, G_r, Gr_c, Gl, do_c, G, bos, i_h, tr, tc, b0, L, j, H, V, BR, RAW,
                        PER_CHANNEL, DT, PREC)
    if PER_CHANNEL:
        _store_rows(dv, dvp * e_r, bos, i_h, tr, L, j, H, V)
        _store_rows(P, o_r * do_r, bos, i_h, tr, L, j, H, V)
        _store_rows(deta, v_r * dvp, bos, i_h, tr, L, j, H, V)
    else:
        _store_rows(dv, dvp * e_r[:, None], bos, i_h, tr, L, j, H, V)
        rm = tr < L
        # one partial sum per value block; the last kernel adds them
        tl.store(P + ((bos + tr) * NV + i_v) * H + i_h, tl.sum(o_r * do_r, 1), mask=rm)
        tl.store(deta + ((bos + tr) * NV + i_v) * H + i_h, tl.sum(v_r * dvp, 1), mask=rm)


@triton.jit
def _bwd_c_kernel(v, eta, G, do, C, cu_seqlens, chunk_indices, chunk_offsets, T, NT, H,
                  V: tl.constexpr, BT: tl.constexpr, BR: tl.constexpr, BV: tl.constexpr, RAW: tl.constexpr,
                  IS_VARLEN: tl.constexpr, PREC: tl.constexpr):
    """falcon-2a: C[t, s] = Σ_j do_t[j] v'_s[j] e^{G_r(t)[j] − G_s[j]} for BR reader rows of one chunk."""
    i_tr, i_bh = tl.program_id(0), tl.program_id(1)
    i_t, i_s = i_tr // (BT // BR), i_tr % (BT // BR)
    i_b, i_h = i_bh // H, i_bh % H
    i_n, i_c, bos, L, _, _ = _seq(i_t, i_b, cu_seqlens, chunk_indices, chunk_offsets, T, NT, IS_VARLEN)
    DT: tl.constexpr = do.dtype.element_ty
    t0 = i_c * BT
    b0 = t0 + i_s * BR
    tr = b0 + tl.arange(0, BR)
    tc = t0 + tl.arange(0, BT)
    before = (tc < b0)[:, None]
    inblk = ((tc >= b0) & (tc < b0 + BR))[:, None]
    C_off = tl.zeros([BR, BT], dtype=tl.float32)
    C_d = tl.zeros([BR, BT], dtype=tl.float32)
    for i_v in range(tl.cdiv(V, BV)):
        j = i_v * BV + tl.arange(0, BV)
        do_r = _rows(do, bos, i_h, tr, L, j, H, V).to(tl.float32)
        ve = _rows(v, bos, i_h, tc, L, j, H, V).to(tl.float32) * _rows(eta, bos, i_h, tc, L, j, H, V)
        Gr = _read_gates(G, bos, i_h, tr, t0, L, j, H, V, RAW, True)
        Gc = _gates(G, bos, i_h, tc, L, j, H, V, True)
        Gref = _gate_at(G, bos, i_h, tl.maximum(b0 - 1, t0), L, j, H, V, True)
        lhs = do_r * tl.exp(tl.where(b0 > t0, Gr - Gref[None, :], NEG_INF))
        rhs = ve * tl.exp(tl.where(before, Gref[None, :] - Gc, NEG_INF))
        C_off += _dot(lhs.to(DT), tl.trans(rhs.to(DT)), PREC)
        Gm = _gate_at(G, bos, i_h, b0 + BR // 2 - 1, L, j, H, V, True)
        lhs_d = do_r * tl.exp(Gr - Gm[None, :])
        rhs_d = tl.where(inblk, ve * tl.exp(tl.where(inblk, Gm[None, :] - Gc, 0.0)), 0.0)
        C_d += _dot(lhs_d.to(DT), tl.trans(rhs_d.to(DT)), PREC)
    out = C_off + tl.where(_sees(tr, tc, RAW), C_d, 0.0)
    _store_rows(C, out, bos, i_h, tr, L, tl.arange(0, BT), H, BT)


@triton.jit
def _bwd_dqdx_kernel(q, k, v, last_key, eta, G, h, dhe, do, C, dq, dxd, cu_seqlens, chunk_indices, chunk_offsets,
                     T, NT, H, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                     BK: tl.constexpr, BV: tl.constexpr, SHIFTED: tl.constexpr, FRESH,
                     RAW: tl.constexpr, PER_CHANNEL: tl.constexpr, IS_VARLEN: tl.constexpr, PREC: tl.constexpr):
    """dq = S_r(t) do_t and the direct part of dx = D_t v'_t for one chunk, one key block."""
    i_k, i_t, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_b, i_h = i_bh // H, i_bh % H
    i_n, i_c, bos, L, boh, gch = _seq(i_t, i_b, cu_seqlens, chunk_indices, chunk_offsets, T, NT, IS_VARLEN)
    DT: tl.constexpr = k.dtype.element_ty
    t0 = i_c * BT
    tc = t0 + tl.arange(0, BT)
    d = i_k * BK + tl.arange(0, BK)
    hc = h + ((boh + i_c) * H + i_h).to(tl.int64) * K * V
    dhc = dhe + (gch * H + i_h).to(tl.int64) * K * V
    q_c = _rows(q, bos, i_h, tc, L, d, H, K).to(DT)
    x_c = _load_x(k, last_key, i_n, i_h, bos, tc, L, d, H, K, SHIFTED, FRESH).to(DT)
    dq_acc = tl.zeros([BT, BK], dtype=tl.float32)
    dx_acc = tl.zeros([BT, BK], dtype=tl.float32)
    if PER_CHANNEL:
        Cm = _rows(C, bos, i_h, tc, L, tl.arange(0, BT), H, BT)
    else:
        Cm = tl.zeros([BT, BT], dtype=tl.float32)
        Gr = _read_gates(G, bos, i_h, tc, t0, L, d, H, V, RAW, False)
        Gc = _gates(G, bos, i_h, tc, L, d, H, V, False)
        Gl = _gate_at(G, bos, i_h, tl.minimum(t0 + BT, L) - 1, L, d, H, V, False)
        e_c = tl.load(eta + (bos + tc) * H + i_h, mask=tc < L, other=0.0)
    for i_v in range(tl.cdiv(V, BV)):
        j = i_v * BV + tl.arange(0, BV)
        tm = (d < K)[:, None] & (j < V)[None, :]
        hb = tl.load(hc + d[:, None] * V + j[None, :], mask=tm, other=0.0).to(DT)
        dhb = tl.load(dhc + d[:, None] * V + j[None, :], mask=tm, other=0.0).to(DT)
        do_c = _rows(do, bos, i_h, tc, L, j, H, V).to(tl.float32)
        v_c = _rows(v, bos, i_h, tc, L, j, H, V).to(tl.float32)
        if PER_CHANNEL:
            Gr = _read_gates(G, bos, i_h, tc, t0, L, j, H, V, RAW, True)
            Gc = _gates(G, bos, i_h, tc, L, j, H, V, True)
            Gl = _gate_at(G, bos, i_h, tl.minimum(t0 + BT, L) - 1, L, j, H, V, True)
            ve = v_c * _rows(eta, bos, i_h, tc, L, j, H, V)
            dq_acc += _dot((do_c * tl.exp(Gr)).to(DT), tl.trans(hb), PREC)
            dx_acc += _dot((ve * tl.exp(Gl[None, :] - Gc)).to(DT), tl.trans(dhb), PREC)
        else:
            ve = v_c * e_c[:, None]
            dq_acc += _dot((do_c * tl.exp(Gr)[:, None]).to(DT), tl.trans(hb), PREC)
            dx_acc += _dot((ve * tl.exp(Gl - Gc)[:, None]).to(DT), tl.trans(dhb), PREC)
            Cm += _dot(do_c.to(DT), tl.trans(ve.to(DT)), PREC)
    if not PER_CHANNEL:
        Cm = Cm * tl.exp(tl.where(_sees(tc, tc, RAW), Gr[:, None] - Gc[None, :], NEG_INF))
    Cd = Cm.to(DT)
    dq_acc += _dot(Cd, x_c, PREC)
    dx_acc += _dot(tl.trans(Cd), q_c, PREC)
    _store_rows(dq, dq_acc, bos, i_h, tc, L, d, H, K)
    _store_rows(dxd, dx_acc, bos, i_h, tc, L, d, H, K)


@triton.jit
def _bwd_final_kernel(k, last_key, beta, lam, eta, G, P, deta, end, dxd, dk, dbeta, dlam, cu_seqlens,
                      chunk_indices, chunk_offsets, eps, floor, T, NT, NTT, H, K: tl.constexpr,
                      V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, NK: tl.constexpr,
                      NV: tl.constexpr, SHIFTED: tl.constexpr, FRESH, RAW: tl.constexpr,
                      PER_CHANNEL: tl.constexpr, NORMALIZE: tl.constexpr, SCALE_RIDGE: tl.constexpr,
                      IS_VARLEN: tl.constexpr):
    """Per chunk: d log γ (reverse cumulative sum of dG), then dβ, dλ, d‖x‖² and dk (shifted back to k)."""
    i_t, i_bh = tl.program_id(0), tl.program_id(1)
    i_b, i_h = i_bh // H, i_bh % H
    i_n, i_c, bos, L, _, gch = _seq(i_t, i_b, cu_seqlens, chunk_indices, chunk_offsets, T, NT, IS_VARLEN)
    t0 = i_c * BT
    t = t0 + tl.arange(0, BT)
    rm = t < L
    is_last = t == tl.minimum(t0 + BT, L) - 1
    if RAW:
        tp = t  # dG_τ takes o_τ' ⊙ do_τ' of the read τ' of S_τ: τ' = τ (RAW), τ + 1 within the chunk (RBW)
    else:
        tp = t + 1
    pm = (tp < t0 + BT) & (tp < L)
    energy = tl.zeros([BT], dtype=tl.float32)
    for i_k in range(NK):
        d = i_k * BK + tl.arange(0, BK)
        x = _load_x(k, last_key, i_n, i_h, bos, t, L, d, H, K, SHIFTED, FRESH).to(tl.float32)
        energy += tl.sum(x * x, 1)
    valid = rm
    if SHIFTED and FRESH:
        valid = valid & (t > 0)
    energy = tl.where(valid, energy, 0.0)
    lam_raw = tl.load(lam + (bos + t) * H + i_h, mask=rm, other=0.0).to(tl.float32)
    if SCALE_RIDGE:
        lam_t = lam_raw * energy
    else:
        lam_t = lam_raw
    den = energy + lam_t + eps
    pos = den > 0
    dden = tl.zeros([BT], dtype=tl.float32)
    dlam_t = tl.zeros([BT], dtype=tl.float32)
    if PER_CHANNEL:
        for i_v in range(NV):
            j = i_v * BV + tl.arange(0, BV)
            e = _rows(eta, bos, i_h, t, L, j, H, V)
            de = _rows(deta, bos, i_h, t, L, j, H, V)
            Pt = tl.where(pm[:, None], _rows(P, bos, i_h, tp, L, j, H, V), 0.0)
            e_end = tl.zeros([BV], dtype=tl.float32)
            for i_k in range(NK):
                e_end += tl.load(end + ((i_k * NTT + gch) * H + i_h) * V + j, mask=j < V, other=0.0)
            dG = tl.where(rm[:, None], Pt - e * de + tl.where(is_last[:, None], e_end[None, :], 0.0), 0.0)
            dg = tl.sum(dG, 0)[None, :] - tl.cumsum(dG, 0) + dG
            a = e * lam_t[:, None]
            free = a <= 1.0 - floor  # the clamp passes no gradient
            dalpha = -dg / (1.0 - tl.minimum(a, 1.0 - floor))
            de = tl.where(valid[:, None], de + tl.where(free, lam_t[:, None] * dalpha, 0.0), 0.0)
            dlam_t += tl.sum(tl.where(free & valid[:, None], e * dalpha, 0.0), 1)
            if NORMALIZE:
                db = tl.where(pos[:, None], de / tl.where(pos, den, 1.0)[:, None], 0.0)
                dden -= tl.sum(db * e, 1)
            else:
                db = de
            _store_rows(dbeta, db, bos, i_h, t, L, j, H, V)
    else:
        Pt = tl.zeros([BT], dtype=tl.float32)
        de = tl.zeros([BT], dtype=tl.float32)
        for i_v in range(NV):
            Pt += tl.load(P + ((bos + tp) * NV + i_v) * H + i_h, mask=pm, other=0.0)
            de += tl.load(deta + ((bos + t) * NV + i_v) * H + i_h, mask=rm, other=0.0)
        e_acc = tl.zeros([BV], dtype=tl.float32)
        for i_k in range(NK):
            for i_v in range(NV):
                j = i_v * BV + tl.arange(0, BV)
                e_acc += tl.load(end + ((i_k * NTT + gch) * H + i_h) * V + j, mask=j < V, other=0.0)
        e_end = tl.sum(e_acc, 0)
        e = tl.load(eta + (bos + t) * H + i_h, mask=rm, other=0.0)
        dG = tl.where(rm, Pt - e * de + tl.where(is_last, e_end, 0.0), 0.0)
        dg = tl.sum(dG, 0) - tl.cumsum(dG, 0) + dG
        a = e * lam_t
        free = a <= 1.0 - floor
        dalpha = -dg / (1.0 - tl.minimum(a, 1.0 - floor))
        de = tl.where(valid, de + tl.where(free, lam_t * dalpha, 0.0), 0.0)
        dlam_t += tl.where(free & valid, e * dalpha, 0.0)
        if NORMALIZE:
            db = tl.where(pos, de / tl.where(pos, den, 1.0), 0.0)
            dden -= db * e
        else:
            db = de
        tl.store(dbeta + (bos + t) * H + i_h, db.to(dbeta.dtype.element_ty), mask=rm)
    dE = dden
    dlam_t += dden
    if SCALE_RIDGE:
        dE += dlam_t * lam_raw
        dl = dlam_t * energy
    else:
        dl = dlam_t
    dE = tl.where(valid, dE, 0.0)
    tl.store(dlam + (bos + t) * H + i_h, dl.to(dlam.dtype.element_ty), mask=rm)
    for i_k in range(NK):
        d = i_k * BK + tl.arange(0, BK)
        x = _load_x(k, last_key, i_n, i_h, bos, t, L, d, H, K, SHIFTED, FRESH).to(tl.float32)
        dx = _rows(dxd, bos, i_h, t, L, d, H, K) + 2.0 * dE[:, None] * x
        if SHIFTED:
            # x_t = k_{t−1}; row −1 is the state's last key, and padded rows write nothing
            _store_rows(dk, dx, bos, i_h, tl.where(rm, t - 1, -1), L, d, H, K)
            if t0 + BT >= L:  # the sequence's last key writes no pair inside it
                tl.store(dk + ((bos + L - 1) * H + i_h) * K + d, tl.zeros([BK], dtype=tl.float32).to(
                    dk.dtype.element_ty), mask=d < K)
        else:
            _store_rows(dk, dx, bos, i_h, t, L, d, H, K)


# ---------------------------------------------------------------- the autograd function


class _Plan(NamedTuple):
    """Everything but the tensors: the rule's flags, block sizes and packed-sequence tables."""

    per_channel: bool
    shifted: bool
    fresh: bool
    raw: bool
    normalize: bool
    scale_ridge: bool
    eps: float
    floor: float
    BT: int
    BR: int
    BK: int
    BV: int
    T: int
    NT: int  # chunks per sequence (without cu_seqlens)
    NTT: int  # chunks of all sequences
    N: int  # sequences
    cu_seqlens: Tensor | None
    chunk_indices: Tensor | None
    chunk_offsets: Tensor | None
    prec: str


def _flags(p: _Plan) -> dict:
    return dict(SHIFTED=p.shifted, FRESH=p.fresh, PER_CHANNEL=p.per_channel, IS_VARLEN=p.cu_seqlens is not None)


def _forward(p: _Plan, q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, S0: Tensor,
             last_key: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    B, T, H, K = k.shape
    V = v.shape[-1]
    dev = k.device
    gshape = (B, T, H, V) if p.per_channel else (B, T, H)
    eta, G = _alloc(gshape, torch.float32, dev), _alloc(gshape, torch.float32, dev)
    h = _alloc((p.NTT + p.N, H, K, V), k.dtype, dev)
    ST = _alloc((p.N, H, K, V), torch.float32, dev)
    o = _alloc(tuple(v.shape), q.dtype, dev)
    tables = (p.cu_seqlens, p.chunk_indices, p.chunk_offsets)
    rows = p.NT if p.cu_seqlens is None else p.NTT
    _prep_kernel[(rows, B * H)](k, last_key, beta, lam, eta, G, *tables, p.eps, p.floor, T, p.NT, H=H, K=K, V=V,
                                BT=p.BT, BK=p.BK, BV=p.BV, NORMALIZE=p.normalize, SCALE_RIDGE=p.scale_ridge,
                                **_flags(p))
    NK, NV = triton.cdiv(K, p.BK), triton.cdiv(V, p.BV)
    _fwd_h_kernel[(NK, NV, p.N * H)](k, v, last_key, eta, G, S0, h, ST, p.cu_seqlens, p.chunk_offsets, T, p.NT,
                                     H=H, K=K, V=V, BT=p.BT, BK=p.BK, BV=p.BV, PREC=p.prec, **_flags(p))
    _fwd_o_kernel[(NV, rows * (p.BT // p.BR), B * H)](q, k, v, last_key, eta, G, h, o, *tables, T, p.NT, H=H, K=K,
                                                       V=V, BT=p.BT, BR=p.BR, BK=p.BK, BV=p.BV, RAW=p.raw,
                                                       PREC=p.prec, **_flags(p))
    return o, ST, eta, G, h


def _backward(p: _Plan, q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, last_key: Tensor,
              eta: Tensor, G: Tensor, h: Tensor, do: Tensor, dST: Tensor | None) -> tuple[Tensor, ...]:
    B, T, H, K = k.shape
    V = v.shape[-1]
    dev = k.device
    NK, NV = triton.cdiv(K, p.BK), triton.cdiv(V, p.BV)
    tables = (p.cu_seqlens, p.chunk_indices, p.chunk_offsets)
    rows = p.NT if p.cu_seqlens is None else p.NTT
    dhe = _alloc((p.NTT, H, K, V), q.dtype, dev)
    dS0 = _alloc((p.N, H, K, V), torch.float32, dev)
    end = _alloc((NK, p.NTT, H, V), torch.float32, dev)
    _bwd_dh_kernel[(NK, NV, p.N * H)](q, do, G, h, dST, dhe, dS0, end, p.cu_seqlens, p.chunk_offsets, T, p.NT,
                                      p.NTT, H=H, K=K, V=V, BT=p.BT, BK=p.BK, BV=p.BV, RAW=p.raw,
                                      PER_CHANNEL=p.per_channel, IS_VARLEN=p.cu_seqlens is not None,
                                      HAS_DST=dST is not None, PREC=p.prec)
    pshape = (B, T, H, V) if p.per_channel else (B, T, NV, H)
    dv = _alloc(tuple(v.shape), v.dtype, dev)
    P, deta = _alloc(pshape, torch.float32, dev), _alloc(pshape, torch.float32, dev)
    _bwd_dv_kernel[(NV, rows * (p.BT // p.BR), B * H)](q, k, v, last_key, eta, G, h, dhe, do, dv, P, deta, *tables,
                                                        T, p.NT, H=H, K=K, V=V, BT=p.BT, BR=p.BR, BK=p.BK,
                                                        BV=p.BV, NV=NV, RAW=p.raw, PREC=p.prec, **_flags(p))
    C = None
    if p.per_channel:
        C = _alloc((B, T, H, p.BT), torch.float32, dev)
        _bwd_c_kernel[(rows * (p.BT // p.BR), B * H)](v, eta, G, do, C, *tables, T, p.NT, H=H, V=V, BT=p.BT,
                                                       BR=p.BR, BV=p.BV, RAW=p.raw,
                                                       IS_VARLEN=p.cu_seqlens is not None, PREC=p.prec)
    dq = _alloc(tuple(q.shape), q.dtype, dev)
    dxd = _alloc(tuple(k.shape), torch.float32, dev)
    _bwd_dqdx_kernel[(NK, rows, B * H)](q, k, v, last_key, eta, G, h, dhe, do, C, dq, dxd, *tables, T, p.NT, H=H,
                                        K=K, V=V, BT=p.BT, BK=p.BK, BV=p.BV, RAW=p.raw, PREC=p.prec, **_flags(p))
    dk = _alloc(tuple(k.shape), k.dtype, dev)
    dbeta = _alloc(tuple(beta.shape), beta.dtype, dev)
    dlam = _alloc(tuple(lam.shape), lam.dtype, dev)
    _bwd_final_kernel[(rows, B * H)](k, last_key, beta, lam, eta, G, P, deta, end, dxd, dk, dbeta, dlam, *tables,
                                     p.eps, p.floor, T, p.NT, p.NTT, H=H, K=K, V=V, BT=p.BT, BK=p.BK, BV=p.BV,
                                     NK=NK, NV=NV, RAW=p.raw, NORMALIZE=p.normalize, SCALE_RIDGE=p.scale_ridge,
                                     **_flags(p))
    return dq, dk, dv, dbeta, dlam, dS0


class _InnerProduct(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, S0: Tensor, last_key: Tensor,
                plan: _Plan) -> tuple[Tensor, Tensor]:
        o, ST, eta, G, h = _forward(plan, q, k, v, beta, lam, S0, last_key)
        ctx.save_for_backward(q, k, v, beta, lam, last_key, eta, G, h)
        ctx.plan = plan
        return o, ST

    @staticmethod
    def backward(ctx, do: Tensor, dST: Tensor | None):
        q, k, v, beta, lam, last_key, eta, G, h = ctx.saved_tensors
        dST = None if dST is None else dST.contiguous()
        grads = _backward(ctx.plan, q, k, v, beta, lam, last_key, eta, G, h, do.contiguous(), dST)
        return (*grads, None, None)


def _check(q: Tensor, v: Tensor, cfg: RuleConfig, chunk_size: int) -> None:
    if cfg.rule not in ("falcon-1a", "falcon-2a"):
        raise ValueError(f"triton_inner_product covers falcon-1a and falcon-2a, got rule={cfg.rule!r}")
    if q.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"backend='triton' takes bfloat16, float16 or float32 inputs, got {q.dtype}; "
                         f"use backend='chunk' for float64")
    if chunk_size not in CHUNK_SIZES:
        raise ValueError(f"chunk_size={chunk_size} for backend='triton'; accepted: {CHUNK_SIZES}")
    if q.shape[-1] > 256 or v.shape[-1] > 256:
        raise ValueError(f"backend='triton' takes Dk, Dv <= 256, got Dk={q.shape[-1]}, Dv={v.shape[-1]}")
    if cfg.per_channel and cfg.decay_floor < MIN_DECAY_FLOOR_PER_CHANNEL:
        raise ValueError(f"falcon-2a on backend='triton' needs decay_floor >= {MIN_DECAY_FLOOR_PER_CHANNEL} "
                         f"(its 16-token blocks factor the per-channel carry around their midpoint), got "
                         f"{cfg.decay_floor}; use backend='chunk' for smaller floors")
    if not (q.is_cuda or interpreting()):
        raise ValueError("backend='triton' needs CUDA tensors (or TRITON_INTERPRET=1 for Triton's CPU interpreter)")


def triton_inner_product(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, cfg: RuleConfig,
                         state: FastWeightState, fresh: bool, chunk_size: int = 64,
                         cu_seqlens: Tensor | None = None) -> tuple[Tensor, FastWeightState]:
    """falcon-1a / falcon-2a with fused Triton chunk kernels (forward and backward).

    q, k ``[B, T, H, Dk]``, v ``[B, T, H, Dv]``, beta ``[B, T, H]`` (``[B, T, H, Dv]`` for 2a), lam ``[B, T, H]``
    in their own dtype; ``state`` a full fp32 state (one row per packed sequence with ``cu_seqlens``).
    Returns o in q's dtype and the final state (S in fp32).
    """
    _check(q, v, cfg, chunk_size)
    B, T, H, Dk = q.shape
    Dv = v.shape[-1]
    if cu_seqlens is None:
        N, NT = B, triton.cdiv(T, chunk_size)
        NTT, chunk_indices, chunk_offsets = N * NT, None, None
    else:
        cu_seqlens = cu_seqlens.to(device=q.device, dtype=torch.int32).contiguous()
        chunk_indices, chunk_offsets = chunk_table(cu_seqlens, chunk_size)
        N, NT, NTT = cu_seqlens.numel() - 1, 0, chunk_indices.shape[0]
    plan = _Plan(per_channel=cfg.per_channel, shifted=cfg.shifted, fresh=fresh, raw=cfg.timing == "raw",
                 normalize=cfg.normalize, scale_ridge=cfg.scale_coupled_ridge, eps=float(cfg.eps),
                 floor=float(cfg.decay_floor), BT=chunk_size, BR=SUB if cfg.per_channel else chunk_size,
                 BK=min(next_power_of_2(Dk), 64), BV=min(next_power_of_2(Dv), 64), T=T, NT=NT, NTT=NTT, N=N,
                 cu_seqlens=cu_seqlens, chunk_indices=chunk_indices, chunk_offsets=chunk_offsets,
                 prec="ieee" if q.dtype == torch.float32 else "tf32")
    S0 = state.S.to(torch.float32).contiguous()
    last_key = state.last_key.to(torch.float32).contiguous()
    o, ST = _InnerProduct.apply(q.contiguous(), k.contiguous(), v.contiguous(), beta.contiguous(), lam.contiguous(),
                                S0, last_key, plan)
    if cu_seqlens is None:
        final_key = k[:, -1]
    else:
        final_key = k[0, cu_seqlens[1:].long() - 1]
    final = FastWeightState(S=ST, last_key=final_key.to(torch.float32),
                            x_tail=ST.new_zeros(N, H, 0, Dk), v_tail=ST.new_zeros(N, H, 0, Dv),
                            tail_mask=torch.zeros(N, 0, dtype=torch.bool, device=q.device))
    return o, final
