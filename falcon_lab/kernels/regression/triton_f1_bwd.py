"""falcon-1 backward in Triton (paper Algorithms 7, 9), on the chunk graph of ``triton_f1``.

Per chunk, with entry state S, exit-state gradient dS_C and B = diag(η)(Y − diag(e^{Gp}) X S) so that
U = A B:
    dU  = (M ⊙ Q Xᵀ)ᵀ dO + diag(e^{G_C − G}) X dS_C            (chunk-local part from ``f1_intra_kernel``)
    dB  = Aᵀ dU                                                  (the transposed UT transform)
    dS  = e^{G_C} dS_C + Qᵀ diag(e^{Gr}) dO − Xᵀ diag(η e^{Gp}) dB
    dL  = −dB Uᵀ (strictly lower), L[t, s] = η_t e^{Gp_t − G_s} x_tᵀ x_s
and the rest (dq, dx, dy, dη and the decay-prefix gradients, then dβ, dλ) follows chunk by chunk. For the gated
delta rule (``GATED_DELTA``) G stands in Gp's place in L and in the write diag(η e^{Gp}), so their decay
gradients go to dG, and dη, d log γ are the gradients of the given ``beta`` and ``lam``. ``SAMPLES`` (rows of
samples, ``triton_f1``) masks the same products as the forward: the state gradient flows back only within a sample.
"""

from __future__ import annotations

import triton
import triton.language as tl

from falcon_lab.kernels.common.triton_helpers import (chunk_of, chunk_samples, cut_pairs, gates, gates_grad, is_pair,
                                                      load_pairs, mm, pair_apart, rev_cumsum, sample_cumsum,
                                                      sample_rev_cumsum, seq_bounds, state_tile)


@triton.jit
def f1_dstate_kernel(q_ptr, k_ptr, lk_ptr, do_ptr, dul_ptr, A_ptr, eta_ptr, G_ptr, g_ptr, dSf_ptr,
                     cu_ptr, coff_ptr, sid_ptr, dh_ptr, dB_ptr, dS0_ptr, T, H: tl.constexpr, Dk: tl.constexpr,
                     Dv: tl.constexpr, C: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
                     SHIFTED: tl.constexpr, FRESH: tl.constexpr, RBW: tl.constexpr, HAS_DSF: tl.constexpr,
                     GATED_DELTA: tl.constexpr, IS_VARLEN: tl.constexpr, SAMPLES: tl.constexpr, PREC: tl.constexpr):
    """The reverse recurrence over one sequence and a block of value columns: stores every chunk's exit-state
    gradient dS_C and dB = Aᵀ dU, and the gradient of the initial state."""
    i_v, i_nh = tl.program_id(0), tl.program_id(1)
    i_n, i_h, bos, T_n, base, offs_k, offs_v, m_kv, p_S = state_tile(0, i_v, i_nh, cu_ptr, coff_ptr, T, H, Dk, Dv,
                                                                     C, BK, BV, IS_VARLEN)
    mk, mv = offs_k < Dk, offs_v < Dv
    if HAS_DSF:
        dS = tl.load(dSf_ptr + (i_n * H + i_h) * Dk * Dv + p_S, mask=m_kv, other=0.0)
    else:
        dS = tl.zeros([BK, BV], dtype=tl.float32)
    r = tl.arange(0, C)
    for i_c in range(tl.cdiv(T_n, C) - 1, -1, -1):
        tl.store(dh_ptr + ((base + i_c) * H + i_h) * Dk * Dv + p_S, dS, mask=m_kv)
        t = i_c * C + r
        valid = t < T_n
        rows = bos + t
        m_v = valid[:, None] & mv[None, :]
        m_k = valid[:, None] & mk[None, :]
        G = tl.load(G_ptr + rows * H + i_h, mask=valid, other=0.0)
        g = tl.load(g_ptr + rows * H + i_h, mask=valid, other=0.0)
        eta = tl.load(eta_ptr + rows * H + i_h, mask=valid, other=0.0)
        last = tl.minimum(C, T_n - i_c * C) - 1
        G_last = tl.load(G_ptr + (bos + i_c * C + last) * H + i_h)
        x = load_pairs(k_ptr, lk_ptr, bos, t, T_n, i_n, i_h, offs_k, H, Dk, SHIFTED, FRESH)
        qk = tl.load(q_ptr + (rows * H + i_h)[:, None] * Dk + offs_k[None, :], mask=m_k, other=0.0)
        do = tl.load(do_ptr + (rows * H + i_h)[:, None] * Dv + offs_v[None, :], mask=m_v, other=0.0)
        carry = tl.where(valid, tl.exp(tl.where(valid, G_last - G, 0.0)), 0.0)
        keep = tl.exp(G_last)
        if SAMPLES:
            sid, prev, sid_last, opens = chunk_samples(sid_ptr, i_n, i_c, t, T, C)
            x = cut_pairs(x, opens, SHIFTED)
            carry = tl.where(sid == sid_last, carry, 0.0)
            keep = tl.where(sid_last == prev, keep, 0.0)
            cont = sid == prev
        du = tl.load(dul_ptr + (rows * H + i_h)[:, None] * Dv + offs_v[None, :], mask=m_v, other=0.0)
        du += carry[:, None] * mm(x, dS, PREC)
        A = tl.load(A_ptr + (rows * H + i_h)[:, None] * C + r[None, :], mask=valid[:, None], other=0.0)
        dB = mm(tl.trans(A), du, PREC)
        tl.store(dB_ptr + (rows * H + i_h)[:, None] * Dv + offs_v[None, :], dB, mask=m_v)
        Gr = G - g if RBW else G
        read = tl.where(valid, tl.exp(Gr), 0.0)
        Gw = G if GATED_DELTA else G - g
        write = tl.where(valid, eta * tl.exp(Gw), 0.0)
        if SAMPLES:  # the entry state reaches the tokens of its own sample alone
            read = tl.where(cont, read, 0.0)
            write = tl.where(cont, write, 0.0)
        dS = (keep * dS + mm(tl.trans(qk), read[:, None] * do, PREC)
              - mm(tl.trans(x), write[:, None] * dB, PREC))
    tl.store(dS0_ptr + (i_n * H + i_h) * Dk * Dv + p_S, dS, mask=m_kv)


@triton.jit
def f1_grad_kernel(q_ptr, k_ptr, v_ptr, beta_ptr, lam_ptr, lk_ptr, do_ptr, U_ptr, dB_ptr, h_ptr, dh_ptr,
                   cu_ptr, cidx_ptr, sid_ptr, dq_ptr, dx_ptr, dv_ptr, dbeta_ptr, dlam_ptr, de_ptr, T, NT, eps, floor,
                   H: tl.constexpr, Dk: tl.constexpr, Dv: tl.constexpr, C: tl.constexpr,
                   BK: tl.constexpr, BV: tl.constexpr, SHIFTED: tl.constexpr, FRESH: tl.constexpr,
                   RBW: tl.constexpr, NORMALIZE: tl.constexpr, COUPLED: tl.constexpr, GATED_DELTA: tl.constexpr,
                   IS_VARLEN: tl.constexpr, SAMPLES: tl.constexpr, PREC: tl.constexpr):
    """Per chunk: dq, dv, dβ, dλ, the write features' gradient without the energy path (dx) and dE."""
    pid, i_h = tl.program_id(0), tl.program_id(1)
    i_n, i_c = chunk_of(pid, cidx_ptr, NT, IS_VARLEN)
    bos, T_n = seq_bounds(i_n, cu_ptr, T, IS_VARLEN)
    r = tl.arange(0, C)
    t = i_c * C + r
    valid = t < T_n
    rows = bos + t
    p_h = h_ptr + (pid * H + i_h) * Dk * Dv
    p_dh = dh_ptr + (pid * H + i_h) * Dk * Dv
    if SAMPLES:
        sid, prev, sid_last, opens = chunk_samples(sid_ptr, i_n, i_c, t, T, C)
    # the gates again (cheaper than storing them): energy needs the whole write feature
    energy = tl.zeros([C], dtype=tl.float32)
    for i_k in range(0, tl.cdiv(Dk, BK)):
        x = load_pairs(k_ptr, lk_ptr, bos, t, T_n, i_n, i_h, i_k * BK + tl.arange(0, BK), H, Dk,
                       SHIFTED, FRESH)
        if SAMPLES:
            x = cut_pairs(x, opens, SHIFTED)
        energy += tl.sum(x * x, 1)
    beta = tl.load(beta_ptr + rows * H + i_h, mask=valid, other=0.0).to(tl.float32)
    lam = tl.load(lam_ptr + rows * H + i_h, mask=valid, other=0.0).to(tl.float32)
    pair = is_pair(t, valid, SHIFTED, FRESH)
    if SAMPLES:
        pair = pair_apart(pair, opens, SHIFTED)
    if GATED_DELTA:
        eta = tl.where(pair, beta, 0.0)
        g = tl.where(valid, lam, 0.0)
    else:
        eta, g = gates(beta, lam, energy, pair, eps, floor, NORMALIZE, COUPLED)
    if SAMPLES:
        G = sample_cumsum(g, sid, r)
    else:
        G = tl.cumsum(g, 0)
    Gp = G - g
    Gw = G if GATED_DELTA else Gp  # the prefix at which the residual reads the state
    G_last = tl.sum(tl.where(r == C - 1, G, 0.0), 0)  # padded rows have g = 0: G there is the last G
    Gr = Gp if RBW else G
    lower = (r[:, None] > r[None, :]) if RBW else (r[:, None] >= r[None, :])
    lower = lower & valid[:, None] & valid[None, :]
    strict = (r[:, None] > r[None, :]) & valid[:, None] & valid[None, :]
    carry = tl.where(valid, tl.exp(G_last - G), 0.0)
    wread = tl.where(valid, tl.exp(Gw), 0.0)  # where the correction reads the entry state
    read = tl.where(valid, tl.exp(Gr), 0.0)
    keep = tl.exp(G_last)
    if SAMPLES:  # the products of one sample's pairs; the entry state read and corrected by its own sample's tokens
        same = sid[:, None] == sid[None, :]
        lower = lower & same
        strict = strict & same
        carry = tl.where(sid == sid_last, carry, 0.0)
        wread = tl.where(sid == prev, wread, 0.0)
        read = tl.where(sid == prev, read, 0.0)
        keep = tl.where(sid_last == prev, keep, 0.0)
    M = tl.where(lower, tl.exp(tl.where(lower, Gr[:, None] - G[None, :], 0.0)), 0.0)
    Dl = tl.where(strict, tl.exp(tl.where(strict, Gw[:, None] - G[None, :], 0.0)), 0.0)
    write = eta * wread

    # value blocks: dO Uᵀ, dL = −dB Uᵀ, dy = η dB and the target part of dη
    dou = tl.zeros([C, C], dtype=tl.float32)
    dL = tl.zeros([C, C], dtype=tl.float32)
    deta = tl.zeros([C], dtype=tl.float32)
    for i_v in range(0, tl.cdiv(Dv, BV)):
        offs_v = i_v * BV + tl.arange(0, BV)
        m = valid[:, None] & (offs_v < Dv)[None, :]
        p = (rows * H + i_h)[:, None] * Dv + offs_v[None, :]
        do = tl.load(do_ptr + p, mask=m, other=0.0).to(tl.float32)
        u = tl.load(U_ptr + p, mask=m, other=0.0)
        dB = tl.load(dB_ptr + p, mask=m, other=0.0)
        y = tl.load(v_ptr + p, mask=m, other=0.0).to(tl.float32)
        dou += mm(do, tl.trans(u), PREC)
        dL -= mm(dB, tl.trans(u), PREC)
        deta += tl.sum(y * dB, 1)
        tl.store(dv_ptr + p, (eta[:, None] * dB).to(dv_ptr.dtype.element_ty), mask=m)
    MD = M * dou
    dL = tl.where(strict, dL, 0.0)
    dK = dL * Dl * eta[:, None]  # the gradient of the Gram X Xᵀ through L
    dK = dK + tl.trans(dK)

    # key blocks: dq, dx, and the row sums the decay gradients need
    qx = tl.zeros([C, C], dtype=tl.float32)
    gram = tl.zeros([C, C], dtype=tl.float32)
    dGr = tl.zeros([C], dtype=tl.float32)
    zs = tl.zeros([C], dtype=tl.float32)
    wb = tl.zeros([C], dtype=tl.float32)
    hs = tl.zeros([1], dtype=tl.float32)
    for i_k in range(0, tl.cdiv(Dk, BK)):
        offs_k = i_k * BK + tl.arange(0, BK)
        mk = offs_k < Dk
        m_k = valid[:, None] & mk[None, :]
        pk = (rows * H + i_h)[:, None] * Dk + offs_k[None, :]
        qk = tl.load(q_ptr + pk, mask=m_k, other=0.0).to(tl.float32)
        x = load_pairs(k_ptr, lk_ptr, bos, t, T_n, i_n, i_h, offs_k, H, Dk, SHIFTED, FRESH)
        if SAMPLES:
            x = cut_pairs(x, opens, SHIFTED)
        qx += mm(qk, tl.trans(x), PREC)
        gram += mm(x, tl.trans(x), PREC)
        do_h = tl.zeros([C, BK], dtype=tl.float32)
        u_ds = tl.zeros([C, BK], dtype=tl.float32)
        db_h = tl.zeros([C, BK], dtype=tl.float32)
        for i_v in range(0, tl.cdiv(Dv, BV)):
            offs_v = i_v * BV + tl.arange(0, BV)
            mv = offs_v < Dv
            m = valid[:, None] & mv[None, :]
            p = (rows * H + i_h)[:, None] * Dv + offs_v[None, :]
            m_kv = mk[:, None] & mv[None, :]
            p_S = offs_k[:, None] * Dv + offs_v[None, :]
            S = tl.load(p_h + p_S, mask=m_kv, other=0.0)
            dS = tl.load(p_dh + p_S, mask=m_kv, other=0.0)
            do = tl.load(do_ptr + p, mask=m, other=0.0).to(tl.float32)
            u = tl.load(U_ptr + p, mask=m, other=0.0)
            dB = tl.load(dB_ptr + p, mask=m, other=0.0)
            do_h += mm(do, tl.trans(S), PREC)
            u_ds += mm(u, tl.trans(dS), PREC)
            db_h += mm(dB, tl.trans(S), PREC)
            hs += tl.sum(tl.sum(S * dS, 1), 0)
        dq = mm(MD, x, PREC) + read[:, None] * do_h
        dGr += tl.sum(qk * read[:, None] * do_h, 1)
        zs += carry * tl.sum(x * u_ds, 1)
        wb += tl.sum(x * db_h, 1)
        dx = (mm(tl.trans(MD), qk, PREC) + carry[:, None] * u_ds - write[:, None] * db_h + mm(dK, x, PREC))
        tl.store(dq_ptr + pk, dq.to(dq_ptr.dtype.element_ty), mask=m_k)
        tl.store(dx_ptr + pk, dx, mask=m_k)

    # decay-prefix gradients: dG_t (G_t as itself), dGp_t (Gp_t = G_{t−1}); then dg by reverse sums
    P3 = MD * qx
    D2 = dL * Dl * gram
    P2 = D2 * eta[:, None]
    deta += tl.sum(D2, 1) - wread * wb
    dG = -tl.sum(P3, 0) - tl.sum(P2, 0) - zs
    dG += tl.where(r == C - 1, tl.sum(zs, 0) + keep * tl.sum(hs, 0), 0.0)
    if GATED_DELTA:  # L's rows and the write read at G
        dG += tl.sum(P2, 1) - write * wb
        dGp = tl.zeros([C], dtype=tl.float32)
    else:
        dGp = tl.sum(P2, 1) - write * wb
    if RBW:
        dGp += dGr + tl.sum(P3, 1)
    else:
        dG += dGr + tl.sum(P3, 1)
    if SAMPLES:
        dg = sample_rev_cumsum(dG + dGp, sid, r) - dGp
    else:
        dg = rev_cumsum(dG) + rev_cumsum(dGp) - dGp
    if GATED_DELTA:
        dbeta = tl.where(pair, deta, 0.0)
        dlam = tl.where(valid, dg, 0.0)
        de = tl.zeros([C], dtype=tl.float32)
    else:
        dbeta, dlam, de = gates_grad(beta, lam, energy, pair, deta, dg, eps, floor, NORMALIZE, COUPLED)
    tl.store(dbeta_ptr + rows * H + i_h, dbeta.to(dbeta_ptr.dtype.element_ty), mask=valid)
    tl.store(dlam_ptr + rows * H + i_h, dlam.to(dlam_ptr.dtype.element_ty), mask=valid)
    tl.store(de_ptr + rows * H + i_h, de, mask=valid)
