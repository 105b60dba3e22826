"""falcon-2 parameter gradients in Triton, per chunk of 16 tokens, from the stored U, dB and chunk states.

With per-column decays every chunk-local product carries a ``[16, 16, BV]`` decay tile; the gradients of the
shared quantities (q, x, λ, ‖x‖²) sum over the column blocks, those of per-column ones (y, β) do not.
``SAMPLES``: the forward's masks (``triton_f2``).
"""

from __future__ import annotations

import triton
import triton.language as tl

from falcon_lab.kernels.common.triton_helpers import chunk_of, gates_grad, mm, rev_cumsum, seq_bounds
from falcon_lab.kernels.regression.triton_f2 import f2_front, f2_gates, read_decay, solve_decay


@triton.jit
def _sample_rev_cumsum(x, sid, r):
    """Σ_{s ≥ t, s in t's sample} x_s per column of a ``[C, BV]`` tile."""
    m = (r[None, :] >= r[:, None]) & (sid[:, None] == sid[None, :])
    return tl.sum(tl.where(m[:, :, None], x[None, :, :], 0.0), 1)


@triton.jit
def f2_grad_kernel(q_ptr, k_ptr, v_ptr, beta_ptr, lam_ptr, lk_ptr, do_ptr, U_ptr, dB_ptr, h_ptr, dh_ptr,
                   cu_ptr, cidx_ptr, sid_ptr, dq_ptr, dx_ptr, dv_ptr, dbeta_ptr, dlam_ptr, de_ptr, T, NT, eps, floor,
                   H: tl.constexpr, Dk: tl.constexpr, Dv: tl.constexpr, C: tl.constexpr,
                   BK: tl.constexpr, BV: tl.constexpr, SHIFTED: tl.constexpr, FRESH: tl.constexpr,
                   RBW: tl.constexpr, NORMALIZE: tl.constexpr, COUPLED: tl.constexpr,
                   IS_VARLEN: tl.constexpr, PREC: tl.constexpr, SAMPLES: tl.constexpr):
    """dq, dv, dβ, dλ, dx (without the energy path) and dE of one chunk."""
    pid, i_h = tl.program_id(0), tl.program_id(1)
    i_n, i_c = chunk_of(pid, cidx_ptr, NT, IS_VARLEN)
    bos, T_n = seq_bounds(i_n, cu_ptr, T, IS_VARLEN)
    offs_k = tl.arange(0, BK)
    mk = offs_k < Dk
    p_h = h_ptr + (pid * H + i_h) * Dk * Dv
    p_dh = dh_ptr + (pid * H + i_h) * Dk * Dv
    md = tl.zeros([C, C], dtype=tl.float32)  # Σ_j e^{Gr_t − G_s} dO_{t,j} U_{s,j}: the read scores' gradient
    dks = tl.zeros([C, C], dtype=tl.float32)  # the Gram's gradient through the system matrices
    dq = tl.zeros([C, BK], dtype=tl.float32)
    dx = tl.zeros([C, BK], dtype=tl.float32)
    dlam = tl.zeros([C], dtype=tl.float32)
    de = tl.zeros([C], dtype=tl.float32)
    r, t, valid, rows, x, qk, energy, gram, qx, sid, prev, last, opens = f2_front(
        q_ptr, k_ptr, lk_ptr, sid_ptr, bos, T_n, i_c, i_n, i_h, H, Dk, C, BK, SHIFTED, FRESH, PREC, SAMPLES)
    mine = valid & (sid == prev)  # the carried state's sample's tokens: they read and correct against it
    keep = last == prev  # the exit state keeps the carried one
    for i_v in range(0, tl.cdiv(Dv, BV)):
        offs_v = i_v * BV + tl.arange(0, BV)
        mv = offs_v < Dv
        y, beta, lam, pair, eta, G, Gp, G_last, Gr = f2_gates(v_ptr, beta_ptr, lam_ptr, rows, t, valid, energy,
                                                              i_h, offs_v, eps, floor, H, Dv, C, SHIFTED, FRESH,
                                                              NORMALIZE, COUPLED, RBW, opens, SAMPLES)
        m_v = valid[:, None] & mv[None, :]
        p_v = (rows * H + i_h)[:, None] * Dv + offs_v[None, :]
        m_kv = mk[:, None] & mv[None, :]
        p_S = offs_k[:, None] * Dv + offs_v[None, :]
        do = tl.load(do_ptr + p_v, mask=m_v, other=0.0).to(tl.float32)
        u = tl.load(U_ptr + p_v, mask=m_v, other=0.0)
        dB = tl.load(dB_ptr + p_v, mask=m_v, other=0.0)
        S = tl.load(p_h + p_S, mask=m_kv, other=0.0)
        dS = tl.load(p_dh + p_S, mask=m_kv, other=0.0)
        tl.store(dv_ptr + p_v, (eta * dB).to(dv_ptr.dtype.element_ty), mask=m_v)
        # reads inside the chunk: o_t ∋ Σ_s (q_tᵀ x_s) e^{Gr_t − G_s} u_s
        P3 = read_decay(G, Gr, valid, C, RBW, sid) * do[:, None, :] * u[None, :, :]
        md += tl.sum(P3, 2)
        P3 = P3 * qx[:, :, None]
        dGr = tl.sum(P3, 1)
        dG = -tl.sum(P3, 0)
        # the system matrices L_j[t, s] = η_{t,j} e^{Gp_{t,j} − G_{s,j}} x_tᵀ x_s, with dL_j = −dB_j U_jᵀ
        D2 = -dB[:, None, :] * u[None, :, :] * solve_decay(G, Gp, valid, C, sid)
        dks += tl.sum(D2 * eta[:, None, :], 2)
        D2 = D2 * gram[:, :, None]
        deta = tl.sum(D2, 1)
        P2 = D2 * eta[:, None, :]
        dGp = tl.sum(P2, 1)
        dG -= tl.sum(P2, 0)
        # the entry state's read: o_t ∋ e^{Gr_t} Sᵀ q_t
        read = tl.where(mine[:, None], tl.exp(Gr), 0.0)
        dGr += read * mm(qk, S, PREC) * do
        dq += mm(read * do, tl.trans(S), PREC)
        # the exit state: e^{G_C} S + Xᵀ (e^{G_C − G} ⊙ U)
        carry = tl.where((valid & (sid == last))[:, None], tl.exp(G_last[None, :] - G), 0.0)
        zs = carry * u * mm(x, dS, PREC)
        dG -= zs
        kept = tl.where(keep, tl.exp(G_last), 0.0) * tl.sum(S * dS, 0)
        dG += tl.where(r[:, None] == C - 1, (tl.sum(zs, 0) + kept)[None, :], 0.0)
        dx += mm(carry * u, tl.trans(dS), PREC)
        # the right-hand side η ⊙ (Y − e^{Gp} ⊙ X S)
        P = mm(x, S, PREC)
        corrected = tl.where(mine[:, None], tl.exp(Gp), 0.0)
        write = eta * corrected
        deta += (y - corrected * P) * dB
        dGp -= write * P * dB
        dx -= mm(write * dB, tl.trans(S), PREC)
        if RBW:
            dGp += dGr
        else:
            dG += dGr
        if SAMPLES:  # within each sample: a later sample's decays are differences that leave this one's g out
            dg = _sample_rev_cumsum(dG + dGp, sid, r) - dGp
        else:
            dg = rev_cumsum(dG) + rev_cumsum(dGp) - dGp
        dbeta, dlam_j, de_j = gates_grad(beta, lam[:, None], energy[:, None], pair[:, None], deta, dg, eps, floor,
                                         NORMALIZE, COUPLED)
        tl.store(dbeta_ptr + p_v, dbeta.to(dbeta_ptr.dtype.element_ty), mask=m_v)
        dlam += tl.sum(tl.where(m_v, dlam_j, 0.0), 1)
        de += tl.sum(tl.where(m_v, de_j, 0.0), 1)
    m_k = valid[:, None] & mk[None, :]
    pk = (rows * H + i_h)[:, None] * Dk + offs_k[None, :]
    dks = dks + tl.trans(dks)
    dq += mm(md, x, PREC)
    dx += mm(tl.trans(md), qk, PREC) + mm(dks, x, PREC)
    tl.store(dq_ptr + pk, dq.to(dq_ptr.dtype.element_ty), mask=m_k)
    tl.store(dx_ptr + pk, dx, mask=m_k)
    tl.store(dlam_ptr + rows * H + i_h, dlam.to(dlam_ptr.dtype.element_ty), mask=valid)
    tl.store(de_ptr + rows * H + i_h, de, mask=valid)
