"""The falcon-1a/2a backward kernels: state gradients (dh), dv and dη, the carry terms, dq and dx, and the
final pass to dk, dβ and dλ. With sample ids (``SAMPLES``: decayed attention over rows of samples, gates given)
the state gradient flows back within a sample only: into the chunk's carried state from its readers of that
sample, and through the chunk to the state before it only where one sample runs through."""

from __future__ import annotations

import triton
import triton.language as tl

from falcon_lab.kernels.common.triton_helpers import (chunk_at, is_pair, load_pairs, load_rows, mm, put_rows,
                                                      state_tile, store_rows)
from falcon_lab.kernels.inner_product.triton_parts import (NEG_INF, _carries, _carry_at, _opens_sample, _outputs,
                                                           _read_carries, _sample_masks, _sees, _source_grads)


@triton.jit
def _bwd_dh_kernel(q, do, G, h, dST, dhe, dS0, end, cu_seqlens, chunk_offsets, sid, T, NT, NTT, H,
                   K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
                   RAW: tl.constexpr, PER_CHANNEL: tl.constexpr, IS_VARLEN: tl.constexpr, HAS_DST: tl.constexpr,
                   PREC: tl.constexpr, SAMPLES: tl.constexpr):
    """Backwards over chunks: dhe[c] = ∂L/∂(state after chunk c), dS0, and Σ_keys dhe[c] ⊙ S_end(c)."""
    i_k, i_v, i_nh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_n, i_h, bos, L, first, d, j, tm, tile = state_tile(i_k, i_v, i_nh, cu_seqlens, chunk_offsets, T, H, K, V, BT,
                                                        BK, BV, IS_VARLEN)
    boh = first + i_n  # h holds one more state per sequence: its final one
    DT: tl.constexpr = q.dtype.element_ty
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
        qb = load_rows(q, bos, i_h, t, L, d, H, K)
        dob = load_rows(do, bos, i_h, t, L, j, H, V).to(tl.float32)
        Gr = _read_carries(G, bos, i_h, t, t0, L, j, H, V, RAW, PER_CHANNEL)
        Gl = _carry_at(G, bos, i_h, tl.minimum(t0 + BT, L) - 1, L, j, H, V, PER_CHANNEL)
        if PER_CHANNEL:
            dS = dS * tl.exp(Gl)[None, :] + mm(tl.trans(qb.to(DT)), (dob * tl.exp(Gr)).to(DT), PREC)
        else:
            er = tl.exp(Gr)
            if SAMPLES:
                _, carried, _, keep = _sample_masks(sid, bos, t, t, t0, L, BT, SAMPLES)
                er = tl.where(carried, er, 0.0)
                dS = tl.where(keep, dS * tl.exp(Gl), 0.0)
            else:
                dS = dS * tl.exp(Gl)
            qg = (qb.to(tl.float32) * er[:, None]).to(DT)
            dS = dS + mm(tl.trans(qg), dob.to(DT), PREC)
    tl.store(dS0 + (i_n * H + i_h) * K * V + tile, dS, mask=tm)


@triton.jit
def _bwd_dv_kernel(q, k, v, last_key, eta, G, h, dhe, do, dv, P, deta, cu_seqlens, chunk_indices, chunk_offsets,
                   sid, T, NT, H, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BR: tl.constexpr,
                   BK: tl.constexpr, BV: tl.constexpr, NV: tl.constexpr, SHIFTED: tl.constexpr,
                   FRESH, RAW: tl.constexpr, PER_CHANNEL: tl.constexpr, IS_VARLEN: tl.constexpr,
                   PREC: tl.constexpr, SAMPLES: tl.constexpr, DELAY: tl.constexpr, ACC: tl.constexpr):
    """For BR rows of one chunk, one value block: dv = η ⊙ dv', the recomputed o ⊙ do (P) and v ⊙ dv' (deta).
    Token t writes the pair of t − DELAY: its dv lands on row t − DELAY. ``ACC``: dv added to what dv holds."""
    i_v, i_tr, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_t, i_s = i_tr // (BT // BR), i_tr % (BT // BR)
    i_b, i_h = i_bh // H, i_bh % H
    i_n, i_c, bos, L, first = chunk_at(i_b * NT + i_t, chunk_indices, cu_seqlens, chunk_offsets, T, NT, BT, IS_VARLEN)
    boh = first + i_n  # h holds one more state per sequence: its final one
    gch = first + i_c
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
        q_r = load_rows(q, bos, i_h, tr, L, d, H, K).to(DT)
        x_r = load_pairs(k, last_key, bos, tr - DELAY, L, i_n, i_h, d, H, K, SHIFTED, FRESH).to(DT)
        q_c = load_rows(q, bos, i_h, tc, L, d, H, K).to(DT)
        x_c = load_pairs(k, last_key, bos, tc - DELAY, L, i_n, i_h, d, H, K, SHIFTED, FRESH).to(DT)
        hb = tl.load(hc + d[:, None] * V + j[None, :], mask=tm, other=0.0).to(DT)
        dhb = tl.load(dhc + d[:, None] * V + j[None, :], mask=tm, other=0.0).to(DT)
        qh += mm(q_r, hb, PREC)
        A += mm(q_r, tl.trans(x_c), PREC)
        xdh += mm(x_r, dhb, PREC)
        At += mm(x_r, tl.trans(q_c), PREC)
    Gr_r = _read_carries(G, bos, i_h, tr, t0, L, j, H, V, RAW, PER_CHANNEL)
    Gr_c = _read_carries(G, bos, i_h, tc, t0, L, j, H, V, RAW, PER_CHANNEL)
    G_r = _carries(G, bos, i_h, tr, L, j, H, V, PER_CHANNEL)
    G_c = _carries(G, bos, i_h, tc, L, j, H, V, PER_CHANNEL)
    Gl = _carry_at(G, bos, i_h, tl.minimum(t0 + BT, L) - 1, L, j, H, V, PER_CHANNEL)
    v_r = load_rows(v, bos, i_h, tr - DELAY, L, j, H, V).to(tl.float32)
    v_c = load_rows(v, bos, i_h, tc - DELAY, L, j, H, V).to(tl.float32)
    do_r = load_rows(do, bos, i_h, tr, L, j, H, V).to(tl.float32)
    do_c = load_rows(do, bos, i_h, tc, L, j, H, V).to(tl.float32)
    if PER_CHANNEL:
        e_r = load_rows(eta, bos, i_h, tr, L, j, H, V)
        e_c = load_rows(eta, bos, i_h, tc, L, j, H, V)
    else:
        e_r = tl.load(eta + (bos + tr) * H + i_h, mask=tr < L, other=0.0)
        e_c = tl.load(eta + (bos + tc) * H + i_h, mask=tc < L, other=0.0)
    same, carried, last, _ = _sample_masks(sid, bos, tr, tc, t0, L, BT, SAMPLES)
    o_r = _outputs(qh, A, Gr_r, G_c, e_c, v_c, G, bos, i_h, tr, tc, b0, t0, L, j, H, V, BR, RAW, PER_CHANNEL,
                   DT, PREC, same, carried, SAMPLES)
    dvp = _source_grads(xdh, At, G_r, Gr_c, Gl, do_c, G, bos, i_h, tr, tc, b0, L, j, H, V, BR, RAW,
                        PER_CHANNEL, DT, PREC, same, last, SAMPLES)
    if PER_CHANNEL:
        put_rows(dv, dvp * e_r, bos, i_h, tr - DELAY, L, j, H, V, ACC)
        store_rows(P, o_r * do_r, bos, i_h, tr, L, j, H, V)
        store_rows(deta, v_r * dvp, bos, i_h, tr, L, j, H, V)
    else:
        put_rows(dv, dvp * e_r[:, None], bos, i_h, tr - DELAY, L, j, H, V, ACC)
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
    i_n, i_c, bos, L, _ = chunk_at(i_b * NT + i_t, chunk_indices, cu_seqlens, chunk_offsets, T, NT, BT, IS_VARLEN)
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
        do_r = load_rows(do, bos, i_h, tr, L, j, H, V).to(tl.float32)
        ve = load_rows(v, bos, i_h, tc, L, j, H, V).to(tl.float32) * load_rows(eta, bos, i_h, tc, L, j, H, V)
        Gr = _read_carries(G, bos, i_h, tr, t0, L, j, H, V, RAW, True)
        Gc = _carries(G, bos, i_h, tc, L, j, H, V, True)
        Gref = _carry_at(G, bos, i_h, tl.maximum(b0 - 1, t0), L, j, H, V, True)
        lhs = do_r * tl.exp(tl.where(b0 > t0, Gr - Gref[None, :], NEG_INF))
        rhs = ve * tl.exp(tl.where(before, Gref[None, :] - Gc, NEG_INF))
        C_off += mm(lhs.to(DT), tl.trans(rhs.to(DT)), PREC)
        Gm = _carry_at(G, bos, i_h, b0 + BR // 2 - 1, L, j, H, V, True)
        lhs_d = do_r * tl.exp(Gr - Gm[None, :])
        rhs_d = tl.where(inblk, ve * tl.exp(tl.where(inblk, Gm[None, :] - Gc, 0.0)), 0.0)
        C_d += mm(lhs_d.to(DT), tl.trans(rhs_d.to(DT)), PREC)
    out = C_off + tl.where(_sees(tr, tc, RAW), C_d, 0.0)
    store_rows(C, out, bos, i_h, tr, L, tl.arange(0, BT), H, BT)


@triton.jit
def _bwd_dqdx_kernel(q, k, v, last_key, eta, G, h, dhe, do, C, dq, dxd, cu_seqlens, chunk_indices, chunk_offsets,
                     sid, T, NT, H, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                     BK: tl.constexpr, BV: tl.constexpr, SHIFTED: tl.constexpr, FRESH,
                     RAW: tl.constexpr, PER_CHANNEL: tl.constexpr, IS_VARLEN: tl.constexpr, PREC: tl.constexpr,
                     SAMPLES: tl.constexpr, DELAY: tl.constexpr, ACC: tl.constexpr):
    """dq = S_r(t) do_t and the direct part of dx = D_t v'_t for one chunk, one key block (token t writing the
    pair of t − DELAY: its dx lands on row t − DELAY). ``ACC``: both added to what dq and dx hold."""
    i_k, i_t, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_b, i_h = i_bh // H, i_bh % H
    i_n, i_c, bos, L, first = chunk_at(i_b * NT + i_t, chunk_indices, cu_seqlens, chunk_offsets, T, NT, BT, IS_VARLEN)
    boh = first + i_n  # h holds one more state per sequence: its final one
    gch = first + i_c
    DT: tl.constexpr = k.dtype.element_ty
    t0 = i_c * BT
    tc = t0 + tl.arange(0, BT)
    d = i_k * BK + tl.arange(0, BK)
    hc = h + ((boh + i_c) * H + i_h).to(tl.int64) * K * V
    dhc = dhe + (gch * H + i_h).to(tl.int64) * K * V
    q_c = load_rows(q, bos, i_h, tc, L, d, H, K).to(DT)
    x_c = load_pairs(k, last_key, bos, tc - DELAY, L, i_n, i_h, d, H, K, SHIFTED, FRESH).to(DT)
    dq_acc = tl.zeros([BT, BK], dtype=tl.float32)
    dx_acc = tl.zeros([BT, BK], dtype=tl.float32)
    if PER_CHANNEL:
        Cm = load_rows(C, bos, i_h, tc, L, tl.arange(0, BT), H, BT)
    else:
        Cm = tl.zeros([BT, BT], dtype=tl.float32)
        Gr = _read_carries(G, bos, i_h, tc, t0, L, d, H, V, RAW, False)
        Gc = _carries(G, bos, i_h, tc, L, d, H, V, False)
        Gl = _carry_at(G, bos, i_h, tl.minimum(t0 + BT, L) - 1, L, d, H, V, False)
        e_c = tl.load(eta + (bos + tc) * H + i_h, mask=tc < L, other=0.0)
        seen = _sees(tc, tc, RAW)
        er = tl.exp(Gr)  # the reads of h_c
        kept = Gl - Gc  # the writes that reach the chunk's end
        if SAMPLES:
            same, carried, last, _ = _sample_masks(sid, bos, tc, tc, t0, L, BT, SAMPLES)
            seen = seen & same
            er = tl.where(carried, er, 0.0)
            kept = tl.where(last, kept, NEG_INF)
        el = tl.exp(kept)
    for i_v in range(tl.cdiv(V, BV)):
        j = i_v * BV + tl.arange(0, BV)
        tm = (d < K)[:, None] & (j < V)[None, :]
        hb = tl.load(hc + d[:, None] * V + j[None, :], mask=tm, other=0.0).to(DT)
        dhb = tl.load(dhc + d[:, None] * V + j[None, :], mask=tm, other=0.0).to(DT)
        do_c = load_rows(do, bos, i_h, tc, L, j, H, V).to(tl.float32)
        v_c = load_rows(v, bos, i_h, tc - DELAY, L, j, H, V).to(tl.float32)
        if PER_CHANNEL:
            Gr = _read_carries(G, bos, i_h, tc, t0, L, j, H, V, RAW, True)
            Gc = _carries(G, bos, i_h, tc, L, j, H, V, True)
            Gl = _carry_at(G, bos, i_h, tl.minimum(t0 + BT, L) - 1, L, j, H, V, True)
            ve = v_c * load_rows(eta, bos, i_h, tc, L, j, H, V)
            dq_acc += mm((do_c * tl.exp(Gr)).to(DT), tl.trans(hb), PREC)
            dx_acc += mm((ve * tl.exp(Gl[None, :] - Gc)).to(DT), tl.trans(dhb), PREC)
        else:
            ve = v_c * e_c[:, None]
            dq_acc += mm((do_c * er[:, None]).to(DT), tl.trans(hb), PREC)
            dx_acc += mm((ve * el[:, None]).to(DT), tl.trans(dhb), PREC)
            Cm += mm(do_c.to(DT), tl.trans(ve.to(DT)), PREC)
    if not PER_CHANNEL:
        Cm = Cm * tl.exp(tl.where(seen, Gr[:, None] - Gc[None, :], NEG_INF))
    Cd = Cm.to(DT)
    dq_acc += mm(Cd, x_c, PREC)
    dx_acc += mm(tl.trans(Cd), q_c, PREC)
    put_rows(dq, dq_acc, bos, i_h, tc, L, d, H, K, ACC)
    put_rows(dxd, dx_acc, bos, i_h, tc - DELAY, L, d, H, K, ACC)


@triton.jit
def _scalar_gate_grads(eta, P, deta, end, bos, t, tp, rm, pm, is_last, gch, i_h, NTT, H, V: tl.constexpr,
                       BT: tl.constexpr, BV: tl.constexpr, NK: tl.constexpr, NV: tl.constexpr, same,
                       SAMPLES: tl.constexpr):
    """One chunk's η, dη (summed over value blocks) and d log γ of a scalar-gate rule: dG_τ = P_τ' − η_τ dη_τ
    (+ the chunk end's term at its last token), reverse-summed within the chunk (and within each sample, with
    sample ids: ``same`` ``[BT, BT]``; a later sample's terms sum to zero, its log-carries shifted by a constant
    changing nothing, and are left out rather than cancelled in rounding)."""
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
    if SAMPLES:
        dg = tl.sum(tl.where(same & (t[None, :] >= t[:, None]), dG[None, :], 0.0), 1)
    else:
        dg = tl.sum(dG, 0) - tl.cumsum(dG, 0) + dG
    return e, de, dg


@triton.jit
def _bwd_final_kernel(k, last_key, beta, lam, eta, G, P, deta, end, dxd, dk, dbeta, dlam, cu_seqlens,
                      chunk_indices, chunk_offsets, sid, eps, floor, T, NT, NTT, H, K: tl.constexpr,
                      V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, NK: tl.constexpr,
                      NV: tl.constexpr, SHIFTED: tl.constexpr, FRESH, RAW: tl.constexpr,
                      PER_CHANNEL: tl.constexpr, NORMALIZE: tl.constexpr, SCALE_RIDGE: tl.constexpr,
                      IS_VARLEN: tl.constexpr, SAMPLES: tl.constexpr):
    """Per chunk: d log γ (reverse cumulative sum of dG), then dβ, dλ, d‖x‖² and dk (shifted back to k)."""
    i_t, i_bh = tl.program_id(0), tl.program_id(1)
    i_b, i_h = i_bh // H, i_bh % H
    i_n, i_c, bos, L, first = chunk_at(i_b * NT + i_t, chunk_indices, cu_seqlens, chunk_offsets, T, NT, BT, IS_VARLEN)
    gch = first + i_c
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
        x = load_pairs(k, last_key, bos, t, L, i_n, i_h, d, H, K, SHIFTED, FRESH).to(tl.float32)
        energy += tl.sum(x * x, 1)
    valid = is_pair(t, rm, SHIFTED, FRESH)
    if SAMPLES and SHIFTED:  # a sample's first token writes no pair: its dx is 0, and so the dk it passes back
        valid = valid & ~_opens_sample(sid, bos, t, L)
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
            e = load_rows(eta, bos, i_h, t, L, j, H, V)
            de = load_rows(deta, bos, i_h, t, L, j, H, V)
            Pt = tl.where(pm[:, None], load_rows(P, bos, i_h, tp, L, j, H, V), 0.0)
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
            store_rows(dbeta, db, bos, i_h, t, L, j, H, V)
    else:
        same, _, _, _ = _sample_masks(sid, bos, t, t, t0, L, BT, SAMPLES)
        e, de, dg = _scalar_gate_grads(eta, P, deta, end, bos, t, tp, rm, pm, is_last, gch, i_h, NTT, H, V, BT,
                                       BV, NK, NV, same, SAMPLES)
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
        x = load_pairs(k, last_key, bos, t, L, i_n, i_h, d, H, K, SHIFTED, FRESH).to(tl.float32)
        dx = load_rows(dxd, bos, i_h, t, L, d, H, K) + 2.0 * dE[:, None] * x
        if SHIFTED:
            # x_t = k_{t−1}; row −1 is the state's last key, and padded rows write nothing
            store_rows(dk, dx, bos, i_h, tl.where(rm, t - 1, -1), L, d, H, K)
            if t0 + BT >= L:  # the sequence's last key writes no pair inside it
                tl.store(dk + ((bos + L - 1) * H + i_h) * K + d, tl.zeros([BK], dtype=tl.float32).to(
                    dk.dtype.element_ty), mask=d < K)
        else:
            store_rows(dk, dx, bos, i_h, t, L, d, H, K)


@triton.jit
def _bwd_gates_kernel(eta, P, deta, end, deta_out, dlogg, cu_seqlens, chunk_indices, chunk_offsets, sid, T, NT, NTT,
                      H, V: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr, NK: tl.constexpr, NV: tl.constexpr,
                      RAW: tl.constexpr, IS_VARLEN: tl.constexpr, SAMPLES: tl.constexpr):
    """Per chunk, for gates given as they are (η and log γ, scalar per token; ``decayed_attention``): dη and
    d log γ, the reverse cumulative sum of dG within the chunk (the same identity as ``_bwd_final_kernel``)."""
    i_t, i_bh = tl.program_id(0), tl.program_id(1)
    i_b, i_h = i_bh // H, i_bh % H
    i_n, i_c, bos, L, first = chunk_at(i_b * NT + i_t, chunk_indices, cu_seqlens, chunk_offsets, T, NT, BT, IS_VARLEN)
    gch = first + i_c
    t0 = i_c * BT
    t = t0 + tl.arange(0, BT)
    rm = t < L
    is_last = t == tl.minimum(t0 + BT, L) - 1
    if RAW:
        tp = t
    else:
        tp = t + 1
    pm = (tp < t0 + BT) & (tp < L)
    same, _, _, _ = _sample_masks(sid, bos, t, t, t0, L, BT, SAMPLES)
    _, de, dg = _scalar_gate_grads(eta, P, deta, end, bos, t, tp, rm, pm, is_last, gch, i_h, NTT, H, V, BT, BV,
                                   NK, NV, same, SAMPLES)
    tl.store(deta_out + (bos + t) * H + i_h, de, mask=rm)
    tl.store(dlogg + (bos + t) * H + i_h, dg, mask=rm)
