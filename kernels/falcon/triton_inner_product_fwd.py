"""The falcon-1a/2a forward kernels: per-token η and log γ (prep), the chunk states (h), the outputs (o)."""

from __future__ import annotations

import triton
import triton.language as tl

from kernels.falcon.triton_inner_product_parts import (_dot, _gate_at, _gates, _load_x, _outputs, _read_gates, _rows,
                                                      _seq, _seq_n, _store_rows)



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
