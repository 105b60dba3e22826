"""falcon-3 backward in Triton, on the chunk graph of ``triton_falcon3`` (slot rows p, tokens i).

Per chunk, with entry state S, exit-state gradient dS_C and B = diag(a)(V − diag(e^{Gp}) X S) so that U = A B:

    dU  = (M ⊙ Q Xᵀ)ᵀ dO + diag(e^{G_last − G}) X dS_C      (the chunk-local part from ``f3_read_kernel``)
    dB  = Aᵀ dU                                              (the transposed UT transform)
    dS  = e^{G_last} dS_C + Qᵀ diag(e^{Gr}) dO − Xᵀ diag(a e^{Gp}) dB
    dL  = −dB Uᵀ on the block-strict lower part,  L[p, s] = a_p e^{Gp_p − G_s} x_pᵀ x_s

and per chunk: dq, dx and dv per slot row, da and d log γ per token (row terms summed over each token's slots;
d log γ from the prefix gradients by reverse sums, as in the falcon-1 backward). ``SAMPLES``: the forward's masks
(``triton_falcon3``), and the reverse sums within each sample.
"""

from __future__ import annotations

import triton
import triton.language as tl

from falcon_lab.kernels.common.triton_helpers import load_rows, mm, rev_cumsum, sample_rev_cumsum
from falcon_lab.kernels.window.triton_falcon3 import (PER_BATCH, chunk_gates, chunk_ids, chunk_tiles, exit_gates,
                                                      read_mask, write_mask)


@triton.jit(do_not_specialize=PER_BATCH)
def f3_dstate_kernel(q_ptr, x_ptr, a_ptr, g_ptr, sid_ptr, do_ptr, dul_ptr, A_ptr, dSf_ptr, dh_ptr, dB_ptr, dS0_ptr,
                     T, NT, H: tl.constexpr, Dk: tl.constexpr, Dv: tl.constexpr, C: tl.constexpr, CT: tl.constexpr,
                     R: tl.constexpr, WP: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, RBW: tl.constexpr,
                     HAS_DSF: tl.constexpr, PREC: tl.constexpr, SAMPLES: tl.constexpr):
    """The reverse recurrence over one sequence and a block of value columns: every chunk's exit-state gradient
    dS_C, dB = Aᵀ dU, and the initial state's gradient."""
    i_v, i_nh = tl.program_id(0), tl.program_id(1)
    i_n, i_h = i_nh // H, i_nh % H
    offs_k = tl.arange(0, BK)
    offs_v = i_v * BV + tl.arange(0, BV)
    mv = offs_v < Dv
    m_kv = (offs_k < Dk)[:, None] & mv[None, :]
    p_S = offs_k[:, None] * Dv + offs_v[None, :]
    if HAS_DSF:
        dS = tl.load(dSf_ptr + i_nh.to(tl.int64) * Dk * Dv + p_S, mask=m_kv, other=0.0)
    else:
        dS = tl.zeros([BK, BV], dtype=tl.float32)
    bos = i_n * T * WP
    for i_c in range(NT - 1, -1, -1):
        tl.store(dh_ptr + ((i_n * NT + i_c) * H + i_h).to(tl.int64) * Dk * Dv + p_S, dS, mask=m_kv)
        _, _, rt, tt, vt, rp, tp, vp = chunk_tiles(i_n * NT + i_c, NT, T, C, CT, R, WP)
        sid_t, sid_p, prev, last = chunk_ids(sid_ptr, i_n, i_c, T, C, rt, tp, SAMPLES)
        g_t, G_t, a_p, g_p, G_p, G_last = chunk_gates(a_ptr, g_ptr, i_n, i_h, T, H, rt, tt, vt, rp, tp, vp, WP,
                                                      sid_t, last, SAMPLES)
        rows = i_c * R + rp
        x = load_rows(x_ptr, bos, i_h, rows, T * WP, offs_k, H, Dk).to(tl.float32)
        carry, keep = exit_gates(G_last, G_p, vp, sid_p, prev, last)
        du = load_rows(dul_ptr, bos, i_h, rows, T * WP, offs_v, H, Dv) + carry[:, None] * mm(x, dS, PREC)
        A = tl.load(A_ptr + ((bos + rows) * H + i_h)[:, None] * R + rp[None, :], mask=vp[:, None], other=0.0)
        dB = mm(tl.trans(A), du, PREC)
        tl.store(dB_ptr + ((bos + rows) * H + i_h)[:, None] * Dv + offs_v[None, :], dB, mask=vp[:, None] & mv[None, :])
        qk = load_rows(q_ptr, i_n * T, i_h, tt, T, offs_k, H, Dk).to(tl.float32)
        do = load_rows(do_ptr, i_n * T, i_h, tt, T, offs_v, H, Dv).to(tl.float32)
        Gr = G_t - g_t if RBW else G_t
        read = tl.where(vt & (sid_t == prev), tl.exp(Gr), 0.0)
        write = tl.where(vp & (sid_p == prev), a_p * tl.exp(G_p - g_p), 0.0)
        dS = (keep * dS + mm(tl.trans(qk), read[:, None] * do, PREC)
              - mm(tl.trans(x), write[:, None] * dB, PREC))
    tl.store(dS0_ptr + i_nh.to(tl.int64) * Dk * Dv + p_S, dS, mask=m_kv)


@triton.jit(do_not_specialize=PER_BATCH)
def f3_grad_kernel(q_ptr, x_ptr, v_ptr, a_ptr, g_ptr, sid_ptr, do_ptr, U_ptr, dB_ptr, h_ptr, dh_ptr,
                   dq_ptr, dx_ptr, dv_ptr, da_ptr, dg_ptr, T, NT,
                   H: tl.constexpr, Dk: tl.constexpr, Dv: tl.constexpr, C: tl.constexpr, CT: tl.constexpr,
                   R: tl.constexpr, WP: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, RBW: tl.constexpr,
                   PREC: tl.constexpr, SAMPLES: tl.constexpr):
    """Per chunk: dq (tokens), dx and dv (slot rows), da and d log γ (tokens)."""
    pid, i_h = tl.program_id(0), tl.program_id(1)
    i_n, i_c, rt, tt, vt, rp, tp, vp = chunk_tiles(pid, NT, T, C, CT, R, WP)
    sid_t, sid_p, prev, last = chunk_ids(sid_ptr, i_n, i_c, T, C, rt, tp, SAMPLES)
    g_t, G_t, a_p, g_p, G_p, G_last = chunk_gates(a_ptr, g_ptr, i_n, i_h, T, H, rt, tt, vt, rp, tp, vp, WP, sid_t,
                                                  last, SAMPLES)
    bos_p, bos_t = i_n * T * WP, i_n * T
    rows = i_c * R + rp
    p_h = h_ptr + (pid * H + i_h).to(tl.int64) * Dk * Dv
    p_dh = dh_ptr + (pid * H + i_h).to(tl.int64) * Dk * Dv
    M, Gr = read_mask(G_t, g_t, G_p, tt, vt, tp, vp, sid_t, sid_p, RBW)
    Dl, strict = write_mask(G_p, g_p, tp, vp, sid_p)
    carry, keep = exit_gates(G_last, G_p, vp, sid_p, prev, last)
    read = tl.where(vt & (sid_t == prev), tl.exp(Gr), 0.0)
    reads_state = vp & (sid_p == prev)  # the rows whose pseudo-values read the entry state
    write = tl.where(reads_state, a_p * tl.exp(G_p - g_p), 0.0)

    # value blocks: dO Uᵀ, dL = −dB Uᵀ, dv = a dB and the target part of da
    dou = tl.zeros([CT, R], dtype=tl.float32)
    dL = tl.zeros([R, R], dtype=tl.float32)
    da = tl.zeros([R], dtype=tl.float32)
    for i_v in range(0, tl.cdiv(Dv, BV)):
        offs_v = i_v * BV + tl.arange(0, BV)
        do = load_rows(do_ptr, bos_t, i_h, tt, T, offs_v, H, Dv).to(tl.float32)
        u = load_rows(U_ptr, bos_p, i_h, rows, T * WP, offs_v, H, Dv)
        dB = load_rows(dB_ptr, bos_p, i_h, rows, T * WP, offs_v, H, Dv)
        y = load_rows(v_ptr, bos_p, i_h, rows, T * WP, offs_v, H, Dv).to(tl.float32)
        dou += mm(do, tl.trans(u), PREC)
        dL -= mm(dB, tl.trans(u), PREC)
        da += tl.sum(y * dB, 1)
        tl.store(dv_ptr + ((bos_p + rows) * H + i_h)[:, None] * Dv + offs_v[None, :],
                 (a_p[:, None] * dB).to(dv_ptr.dtype.element_ty), mask=vp[:, None] & (offs_v < Dv)[None, :])
    MD = M * dou
    dL = tl.where(strict, dL, 0.0)
    dK = dL * Dl * a_p[:, None]  # the gradient of the Gram X Xᵀ through L
    dK = dK + tl.trans(dK)

    # key blocks: dq, dx, and the row sums the decay gradients need
    qx = tl.zeros([CT, R], dtype=tl.float32)
    gram = tl.zeros([R, R], dtype=tl.float32)
    dGr = tl.zeros([CT], dtype=tl.float32)
    zs = tl.zeros([R], dtype=tl.float32)
    wb = tl.zeros([R], dtype=tl.float32)
    hs = tl.zeros([1], dtype=tl.float32)
    for i_k in range(0, tl.cdiv(Dk, BK)):
        offs_k = i_k * BK + tl.arange(0, BK)
        mk = offs_k < Dk
        qk = load_rows(q_ptr, bos_t, i_h, tt, T, offs_k, H, Dk).to(tl.float32)
        x = load_rows(x_ptr, bos_p, i_h, rows, T * WP, offs_k, H, Dk).to(tl.float32)
        qx += mm(qk, tl.trans(x), PREC)
        gram += mm(x, tl.trans(x), PREC)
        do_h = tl.zeros([CT, BK], dtype=tl.float32)
        u_ds = tl.zeros([R, BK], dtype=tl.float32)
        db_h = tl.zeros([R, BK], dtype=tl.float32)
        for i_v in range(0, tl.cdiv(Dv, BV)):
            offs_v = i_v * BV + tl.arange(0, BV)
            m_kv = mk[:, None] & (offs_v < Dv)[None, :]
            p_S = offs_k[:, None] * Dv + offs_v[None, :]
            S = tl.load(p_h + p_S, mask=m_kv, other=0.0)
            dS = tl.load(p_dh + p_S, mask=m_kv, other=0.0)
            do = load_rows(do_ptr, bos_t, i_h, tt, T, offs_v, H, Dv).to(tl.float32)
            u = load_rows(U_ptr, bos_p, i_h, rows, T * WP, offs_v, H, Dv)
            dB = load_rows(dB_ptr, bos_p, i_h, rows, T * WP, offs_v, H, Dv)
            do_h += mm(do, tl.trans(S), PREC)
            u_ds += mm(u, tl.trans(dS), PREC)
            db_h += mm(dB, tl.trans(S), PREC)
            hs += tl.sum(tl.sum(S * dS, 1), 0)
        dq = mm(MD, x, PREC) + read[:, None] * do_h
        dGr += tl.sum(qk * read[:, None] * do_h, 1)
        zs += carry * tl.sum(x * u_ds, 1)
        wb += tl.sum(x * db_h, 1)
        dx = mm(tl.trans(MD), qk, PREC) + carry[:, None] * u_ds - write[:, None] * db_h + mm(dK, x, PREC)
        tl.store(dq_ptr + ((bos_t + tt) * H + i_h)[:, None] * Dk + offs_k[None, :], dq.to(dq_ptr.dtype.element_ty),
                 mask=vt[:, None] & mk[None, :])
        tl.store(dx_ptr + ((bos_p + rows) * H + i_h)[:, None] * Dk + offs_k[None, :],
                 dx.to(dx_ptr.dtype.element_ty), mask=vp[:, None] & mk[None, :])

    # decay-prefix gradients per row (a row's G and Gp are its token's), then summed over each token's slots
    P3 = MD * qx
    D2 = dL * Dl * gram
    P2 = D2 * a_p[:, None]
    da += tl.sum(D2, 1) - tl.where(reads_state, tl.exp(G_p - g_p), 0.0) * wb
    dG_p = -tl.sum(P3, 0) - tl.sum(P2, 0) - zs
    dGp_p = tl.sum(P2, 1) - write * wb
    own = (rp[None, :] // WP == rt[:, None]) & vp[None, :]  # [CT, R]: token i's slots
    dG = tl.sum(tl.where(own, dG_p[None, :], 0.0), 1)
    dGp = tl.sum(tl.where(own, dGp_p[None, :], 0.0), 1)
    da_t = tl.sum(tl.where(own, da[None, :], 0.0), 1)
    # G_last, the exit state's decay, is the prefix of the chunk's last token
    at_last = rt == tl.sum(vt.to(tl.int32), 0) - 1
    dG += tl.where(at_last, tl.sum(zs, 0) + keep * tl.sum(hs, 0), 0.0)
    if RBW:
        dGp += dGr + tl.sum(P3, 1)
    else:
        dG += dGr + tl.sum(P3, 1)
    if SAMPLES:
        dg = sample_rev_cumsum(dG, sid_t, rt) + sample_rev_cumsum(dGp, sid_t, rt) - dGp
    else:
        dg = rev_cumsum(dG) + rev_cumsum(dGp) - dGp
    tl.store(da_ptr + (bos_t + tt) * H + i_h, da_t, mask=vt)
    tl.store(dg_ptr + (bos_t + tt) * H + i_h, dg, mask=vt)
