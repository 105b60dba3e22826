"""The falcon-1a/2a forward kernels: per-token η and log γ (prep), the chunk states (h), the outputs (o); and the
log-carries summed within chunks and samples of decayed attention over rows of samples (``_sample_prefix_kernel``)."""

from __future__ import annotations

import triton
import triton.language as tl

from falcon_lab.kernels.common.triton_helpers import (chunk_at, gates, is_pair, load_pairs, load_rows, mm, state_tile,
                                           store_rows)
from falcon_lab.kernels.inner_product.triton_parts import (NEG_INF, _carries, _carry_at, _ids_at, _opens_sample,
                                                           _outputs, _read_carries, _sample_cumsum, _sample_masks)


@triton.jit
def _prep_kernel(k, last_key, beta, lam, eta, G, cu_seqlens, chunk_indices, chunk_offsets, sid, eps, floor, T, NT,
                 H, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
                 BV: tl.constexpr, SHIFTED: tl.constexpr, FRESH, PER_CHANNEL: tl.constexpr,
                 NORMALIZE: tl.constexpr, SCALE_RIDGE: tl.constexpr, IS_VARLEN: tl.constexpr,
                 SAMPLES: tl.constexpr):
    """η and the chunk-local cumulative log-carry G of every token of one chunk (with sample ids, scalar gates
    only: G within each sample, and shifted, a sample's first token no pair)."""
    i_t, i_bh = tl.program_id(0), tl.program_id(1)
    i_b, i_h = i_bh // H, i_bh % H
    i_n, i_c, bos, L, _ = chunk_at(i_b * NT + i_t, chunk_indices, cu_seqlens, chunk_offsets, T, NT, BT, IS_VARLEN)
    t = i_c * BT + tl.arange(0, BT)
    rm = t < L
    energy = tl.zeros([BT], dtype=tl.float32)
    for i_k in range(tl.cdiv(K, BK)):
        d = i_k * BK + tl.arange(0, BK)
        x = load_pairs(k, last_key, bos, t, L, i_n, i_h, d, H, K, SHIFTED, FRESH)
        energy += tl.sum(x * x, 1)
    pair = is_pair(t, rm, SHIFTED, FRESH)  # x_1 = 0 of a fresh sequence is not a pair
    if SAMPLES and SHIFTED:
        pair = pair & ~_opens_sample(sid, bos, t, L)
    lam_t = tl.load(lam + (bos + t) * H + i_h, mask=rm, other=0.0).to(tl.float32)
    if PER_CHANNEL:
        for i_v in range(tl.cdiv(V, BV)):
            j = i_v * BV + tl.arange(0, BV)
            b = load_rows(beta, bos, i_h, t, L, j, H, V).to(tl.float32)
            e, g = gates(b, lam_t[:, None], energy[:, None], pair[:, None], eps, floor, NORMALIZE, SCALE_RIDGE)
            store_rows(eta, e, bos, i_h, t, L, j, H, V)
            store_rows(G, tl.cumsum(g, 0), bos, i_h, t, L, j, H, V)
    else:
        b = tl.load(beta + (bos + t) * H + i_h, mask=rm, other=0.0).to(tl.float32)
        e, g = gates(b, lam_t, energy, pair, eps, floor, NORMALIZE, SCALE_RIDGE)
        tl.store(eta + (bos + t) * H + i_h, e, mask=rm)
        if SAMPLES:
            Gt = _sample_cumsum(g, _ids_at(sid, bos, t, L), t)
        else:
            Gt = tl.cumsum(g, 0)
        tl.store(G + (bos + t) * H + i_h, Gt, mask=rm)


@triton.jit
def _fwd_h_kernel(k, v, last_key, eta, G, S0, h, ST, cu_seqlens, chunk_offsets, sid, T, NT, H,
                  K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
                  SHIFTED: tl.constexpr, FRESH, PER_CHANNEL: tl.constexpr,
                  IS_VARLEN: tl.constexpr, PREC: tl.constexpr, SAMPLES: tl.constexpr, DELAY: tl.constexpr):
    """The state before every chunk (h) and after the last one (ST), one (key block, value block) tile. With
    sample ids (``sid``), the state of the sample of each chunk's last token. Token t writes the pair of token
    t − DELAY (0 before the sequence)."""
    i_k, i_v, i_nh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_n, i_h, bos, L, first, d, j, tm, tile = state_tile(i_k, i_v, i_nh, cu_seqlens, chunk_offsets, T, H, K, V, BT,
                                                        BK, BV, IS_VARLEN)
    boh = first + i_n  # h holds one more state per sequence: its final one
    DT: tl.constexpr = k.dtype.element_ty
    S = tl.load(S0 + (i_n * H + i_h) * K * V + tile, mask=tm, other=0.0).to(tl.float32)
    for c in range(tl.cdiv(L, BT)):
        tl.store(h + ((boh + c) * H + i_h).to(tl.int64) * K * V + tile, S.to(h.dtype.element_ty), mask=tm)
        t = c * BT + tl.arange(0, BT)
        x = load_pairs(k, last_key, bos, t - DELAY, L, i_n, i_h, d, H, K, SHIFTED, FRESH).to(DT)
        vv = load_rows(v, bos, i_h, t - DELAY, L, j, H, V).to(tl.float32)
        last = tl.minimum(c * BT + BT, L) - 1
        Gt = _carries(G, bos, i_h, t, L, j, H, V, PER_CHANNEL)
        Gl = _carry_at(G, bos, i_h, last, L, j, H, V, PER_CHANNEL)
        if PER_CHANNEL:
            et = load_rows(eta, bos, i_h, t, L, j, H, V)
            w = et * tl.exp(Gl[None, :] - Gt)
            S = S * tl.exp(Gl)[None, :] + mm(tl.trans(x), (vv * w).to(DT), PREC)
        else:
            et = tl.load(eta + (bos + t) * H + i_h, mask=t < L, other=0.0)
            kept = Gl - Gt
            if SAMPLES:
                _, _, last_s, keep = _sample_masks(sid, bos, t, t, c * BT, L, BT, SAMPLES)
                kept = tl.where(last_s, kept, NEG_INF)
                S = tl.where(keep, S * tl.exp(Gl), 0.0)
            else:
                S = S * tl.exp(Gl)
            w = et * tl.exp(kept)
            S = S + mm(tl.trans(x), (vv * w[:, None]).to(DT), PREC)
    tl.store(ST + (i_n * H + i_h) * K * V + tile, S, mask=tm)
    n_chunks = tl.cdiv(L, BT)
    tl.store(h + ((boh + n_chunks) * H + i_h).to(tl.int64) * K * V + tile, S.to(h.dtype.element_ty), mask=tm)


@triton.jit
def _fwd_o_kernel(q, k, v, last_key, eta, G, h, o, cu_seqlens, chunk_indices, chunk_offsets, sid, T, NT,
                  H, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BR: tl.constexpr,
                  BK: tl.constexpr, BV: tl.constexpr, SHIFTED: tl.constexpr, FRESH,
                  RAW: tl.constexpr, PER_CHANNEL: tl.constexpr, IS_VARLEN: tl.constexpr, PREC: tl.constexpr,
                  SAMPLES: tl.constexpr, DELAY: tl.constexpr):
    """Outputs of BR rows of one chunk, one value block (token t writing the pair of t − DELAY)."""
    i_v, i_tr, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_t, i_s = i_tr // (BT // BR), i_tr % (BT // BR)
    i_b, i_h = i_bh // H, i_bh % H
    i_n, i_c, bos, L, first = chunk_at(i_b * NT + i_t, chunk_indices, cu_seqlens, chunk_offsets, T, NT, BT, IS_VARLEN)
    boh = first + i_n  # h holds one more state per sequence: its final one
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
        qb = load_rows(q, bos, i_h, tr, L, d, H, K).to(DT)
        xb = load_pairs(k, last_key, bos, tc - DELAY, L, i_n, i_h, d, H, K, SHIFTED, FRESH).to(DT)
        hb = tl.load(hc + d[:, None] * V + j[None, :], mask=(d < K)[:, None] & (j < V)[None, :], other=0.0)
        qh += mm(qb, hb.to(DT), PREC)
        A += mm(qb, tl.trans(xb), PREC)
    Gr = _read_carries(G, bos, i_h, tr, t0, L, j, H, V, RAW, PER_CHANNEL)
    Gc = _carries(G, bos, i_h, tc, L, j, H, V, PER_CHANNEL)
    vc = load_rows(v, bos, i_h, tc - DELAY, L, j, H, V).to(tl.float32)
    if PER_CHANNEL:
        ec = load_rows(eta, bos, i_h, tc, L, j, H, V)
    else:
        ec = tl.load(eta + (bos + tc) * H + i_h, mask=tc < L, other=0.0)
    same, carried, _, _ = _sample_masks(sid, bos, tr, tc, t0, L, BT, SAMPLES)
    out = _outputs(qh, A, Gr, Gc, ec, vc, G, bos, i_h, tr, tc, b0, t0, L, j, H, V, BR, RAW, PER_CHANNEL, DT,
                   PREC, same, carried, SAMPLES)
    store_rows(o, out, bos, i_h, tr, L, j, H, V)


@triton.jit
def _sample_prefix_kernel(g, sid, G, T, H, BT: tl.constexpr):
    """G of decayed attention over rows of samples (``[B, T, H]`` log decays, ``sid [B, T]``): the log decays
    summed within each chunk of BT tokens and each sample, for one chunk of one row and head."""
    i_t, i_bh = tl.program_id(0), tl.program_id(1)
    i_b, i_h = i_bh // H, i_bh % H
    bos = i_b * T
    t = i_t * BT + tl.arange(0, BT)
    rm = t < T
    gt = tl.load(g + (bos + t) * H + i_h, mask=rm, other=0.0)
    tl.store(G + (bos + t) * H + i_h, _sample_cumsum(gt, _ids_at(sid, bos, t, T), t), mask=rm)
