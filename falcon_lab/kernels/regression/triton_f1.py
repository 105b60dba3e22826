"""falcon-1 forward in Triton: the UT transform per chunk, the state pass, the outputs (paper Algorithms 6, 8).

Inside a chunk of C tokens entered with state S (chunk-local log-prefixes G_t = Σ_{r≤t} g_r, Gp_t = G_t − g_t),
the pseudo-values u_t = η_t (y_t − S_{t−1}ᵀ x_t) solve

    (I + L) U = diag(η) (Y − diag(e^{Gp}) X S),   L[t, s] = η_t e^{Gp_t − G_s} x_tᵀ x_s  (s < t),

so with A = (I + L)⁻¹ (the UT transform), W = A diag(η e^{Gp}) X and Ũ = A diag(η) Y: U = Ũ − W S. Then
o_t = e^{Gr_t} q_tᵀ S + Σ_s M[t, s] (q_tᵀ x_s) u_s (RAW: s ≤ t, Gr = G; RBW: s < t, Gr = Gp; M = e^{Gr_t − G_s})
and the exit state is e^{G_C} S + Xᵀ diag(e^{G_C − G}) U. Decay ratios are formed only for s ≤ t.

``GATED_DELTA`` runs the gated delta rule S_t = γ_t (I − η_t x_t x_tᵀ) S_{t−1} + η_t x_t y_tᵀ (``falcon_lab.kernels.delta``)
on the same kernels: η_t and g_t = log γ_t are given (in ``beta`` and ``lam``), and the residual reads the state
already decayed by γ_t, u_t = η_t (y_t − (γ_t S_{t−1})ᵀ x_t), so G takes Gp's place in L and W (``Gw``); the
outputs and the exit state are formed as above.

``SAMPLES`` runs rows of samples told apart by their ids (``sid_ptr``, ``[B, T]``; ``triton_helpers.chunk_samples``)
in full chunks: L and the output products are masked to pairs of one sample (so A is block diagonal by sample), the
prefixes G restart at each sample, only the tokens of the carried state's sample read it (W's and the reads' other
rows are 0), and the exit state keeps the carried one only when the chunk's last token is still of its sample, plus
the writes of the last token's sample.
"""

from __future__ import annotations

import triton
import triton.language as tl

from falcon_lab.kernels.common.triton_helpers import (chunk_of, chunk_samples, cut_pairs, gates, is_pair, load_pairs,
                                                      mm, pair_apart, sample_cumsum, seq_bounds, state_tile)


@triton.jit
def _inverse_by_doubling(L, C: tl.constexpr, PREC: tl.constexpr):
    """(I + L)⁻¹ for a strictly lower-triangular ``[C, C]`` tile (C a power of two, 2 to 128), by doubling blocks.

    With Ad the block-diagonal inverse of the diagonal blocks of size b / 2, the blocks of size b are inverted
    together as Ad − Ad C Ad, C the lower-left quadrants of the blocks of size b in L (the 2 × 2 block formula
    [[A, 0], [C, D]]⁻¹ = [[A⁻¹, 0], [−D⁻¹ C A⁻¹, D⁻¹]]): blocks of 2 are I − C, then two products a doubling,
    2 log₂(C) − 2 dependent products in all (10 at C = 64, where substitution row by row took 15 and the merge of
    its blocks 4 more); in bf16 as accurate as substitution (both round the partial inverse at every product)."""
    LOG2_C: tl.constexpr = 1 if C <= 2 else 2 if C <= 4 else 3 if C <= 8 else 4 if C <= 16 else 5 if C <= 32 \
        else 6 if C <= 64 else 7
    r = tl.arange(0, C)
    eye = tl.where(r[:, None] == r[None, :], 1.0, 0.0)
    pair = ((r[:, None] // 2) == (r[None, :] // 2)) & (r[:, None] % 2 == 1) & (r[None, :] % 2 == 0)
    A = eye - tl.where(pair, L, 0.0)
    for level in range(2, LOG2_C + 1):  # a loop, not unrolled: the registers of one doubling
        half = (r >> (level - 1)) & 1  # 0 in the first half of a token's block of 2^level, 1 in the second
        quadrant = ((r[:, None] >> level) == (r[None, :] >> level)) & (half[:, None] == 1) & (half[None, :] == 0)
        A = A - mm(mm(A, tl.where(quadrant, L, 0.0), PREC), A, PREC)
    return A


@triton.jit
def _inverse_by_substitution(L, C: tl.constexpr, PREC: tl.constexpr):
    """(I + L)⁻¹ for a strictly lower-triangular ``[C, C]`` tile (C ∈ {16, 32, 64}), in blocks of 16.

    The diagonal blocks are inverted together by forward substitution, one row of every block per step
    (Ad = (I + L_d)⁻¹); then I + L = (I + L_d)(I + M) with M = Ad L_off strictly block-lower, so M^{C/16} = 0
    and (I + M)⁻¹ = (I − M)(I + M²) (just I − M for two blocks)."""
    r = tl.arange(0, C)
    eye = tl.where(r[:, None] == r[None, :], 1.0, 0.0)
    same = (r[:, None] // 16) == (r[None, :] // 16)
    Ld = tl.where(same, L, 0.0)
    Ad = eye
    for i in range(1, 16):
        row = (r % 16 == i)[:, None]  # rows j < i of every block are final
        Ad = tl.where(row, eye - mm(tl.where(row, Ld, 0.0), Ad, PREC), Ad)
    if C > 16:
        M = mm(Ad, tl.where(same, 0.0, L), PREC)
        P = eye - M
        if C > 32:
            P = mm(P, eye + mm(M, M, PREC), PREC)
        Ad = mm(P, Ad, PREC)
    return Ad


@triton.jit
def unit_lower_inverse(L, C: tl.constexpr, PREC: tl.constexpr, DOUBLING: tl.constexpr):
    """(I + L)⁻¹ for a strictly lower-triangular ``[C, C]`` tile: by doubling blocks (``DOUBLING``) or by substitution
    in blocks of 16 (``triton_launch.INVERSE`` says which)."""
    if DOUBLING:
        return _inverse_by_doubling(L, C, PREC)
    else:
        return _inverse_by_substitution(L, C, PREC)


@triton.jit
def f1_prep_kernel(k_ptr, v_ptr, beta_ptr, lam_ptr, lk_ptr, cu_ptr, cidx_ptr, sid_ptr,
                   A_ptr, W_ptr, Ut_ptr, eta_ptr, G_ptr, g_ptr, T, NT, eps, floor,
                   H: tl.constexpr, Dk: tl.constexpr, Dv: tl.constexpr, C: tl.constexpr,
                   BK: tl.constexpr, BV: tl.constexpr, SHIFTED: tl.constexpr, FRESH: tl.constexpr,
                   NORMALIZE: tl.constexpr, COUPLED: tl.constexpr, GATED_DELTA: tl.constexpr,
                   IS_VARLEN: tl.constexpr, SAMPLES: tl.constexpr, PREC: tl.constexpr, SOLVE_PREC: tl.constexpr,
                   DOUBLING: tl.constexpr):
    """Per chunk: η, g, G, the UT transform A, W = A diag(η e^{Gw}) X and Ũ = A diag(η) Y (Gw = Gp, or G for
    the gated delta rule). SOLVE_PREC: the inverse's matmuls (errors in A reach every output;
    launch.SOLVE_PRECISION says which)."""
    pid, i_h = tl.program_id(0), tl.program_id(1)
    i_n, i_c = chunk_of(pid, cidx_ptr, NT, IS_VARLEN)
    bos, T_n = seq_bounds(i_n, cu_ptr, T, IS_VARLEN)
    r = tl.arange(0, C)
    t = i_c * C + r
    valid = t < T_n
    rows = bos + t
    if SAMPLES:
        sid, prev, _, opens = chunk_samples(sid_ptr, i_n, i_c, t, T, C)
    energy = tl.zeros([C], dtype=tl.float32)
    gram = tl.zeros([C, C], dtype=tl.float32)
    for i_k in range(0, tl.cdiv(Dk, BK)):
        x = load_pairs(k_ptr, lk_ptr, bos, t, T_n, i_n, i_h, i_k * BK + tl.arange(0, BK), H, Dk,
                       SHIFTED, FRESH)
        if SAMPLES:
            x = cut_pairs(x, opens, SHIFTED)
        energy += tl.sum(x * x, 1)
        gram += mm(x, tl.trans(x), PREC)
    beta = tl.load(beta_ptr + rows * H + i_h, mask=valid, other=0.0).to(tl.float32)
    lam = tl.load(lam_ptr + rows * H + i_h, mask=valid, other=0.0).to(tl.float32)
    pair = is_pair(t, valid, SHIFTED, FRESH)
    if SAMPLES:
        pair = pair_apart(pair, opens, SHIFTED)
    if GATED_DELTA:  # η and log γ given (beta, lam); the decay of a token reaches the state before the pair's gate
        eta = tl.where(pair, beta, 0.0)
        g = tl.where(valid, lam, 0.0)
    else:
        eta, g = gates(beta, lam, energy, pair, eps, floor, NORMALIZE, COUPLED)
    if SAMPLES:
        G = sample_cumsum(g, sid, r)
    else:
        G = tl.cumsum(g, 0)
    Gw = G if GATED_DELTA else G - g  # the prefix at which the residual reads the state
    tl.store(eta_ptr + rows * H + i_h, eta, mask=valid)
    tl.store(G_ptr + rows * H + i_h, G, mask=valid)
    tl.store(g_ptr + rows * H + i_h, g, mask=valid)
    strict = (r[:, None] > r[None, :]) & valid[:, None] & valid[None, :]
    if SAMPLES:
        strict = strict & (sid[:, None] == sid[None, :])
    decay = tl.where(strict, tl.exp(tl.where(strict, Gw[:, None] - G[None, :], 0.0)), 0.0)
    A = unit_lower_inverse(eta[:, None] * decay * gram, C, SOLVE_PREC, DOUBLING)
    tl.store(A_ptr + (rows * H + i_h)[:, None] * C + r[None, :], A, mask=valid[:, None])
    scale_w = eta * tl.exp(Gw)
    if SAMPLES:  # W's rows of the tokens of other samples than the carried state's are 0 (A is block diagonal)
        scale_w = tl.where(sid == prev, scale_w, 0.0)
    for i_k in range(0, tl.cdiv(Dk, BK)):
        offs_k = i_k * BK + tl.arange(0, BK)
        x = load_pairs(k_ptr, lk_ptr, bos, t, T_n, i_n, i_h, offs_k, H, Dk, SHIFTED, FRESH)
        if SAMPLES:
            x = cut_pairs(x, opens, SHIFTED)
        w = mm(A, scale_w[:, None] * x, PREC)
        tl.store(W_ptr + (rows * H + i_h)[:, None] * Dk + offs_k[None, :], w.to(W_ptr.dtype.element_ty),
                 mask=valid[:, None] & (offs_k < Dk)[None, :])
    for i_v in range(0, tl.cdiv(Dv, BV)):
        offs_v = i_v * BV + tl.arange(0, BV)
        m = valid[:, None] & (offs_v < Dv)[None, :]
        y = tl.load(v_ptr + (rows * H + i_h)[:, None] * Dv + offs_v[None, :], mask=m, other=0.0).to(tl.float32)
        ut = mm(A, eta[:, None] * y, PREC)
        tl.store(Ut_ptr + (rows * H + i_h)[:, None] * Dv + offs_v[None, :], ut, mask=m)


@triton.jit
def f1_state_kernel(k_ptr, lk_ptr, W_ptr, Ut_ptr, G_ptr, S0_ptr, cu_ptr, coff_ptr, sid_ptr, h_ptr, U_ptr, Sf_ptr,
                    T, H: tl.constexpr, Dk: tl.constexpr, Dv: tl.constexpr, C: tl.constexpr,
                    BK: tl.constexpr, BV: tl.constexpr, SHIFTED: tl.constexpr, FRESH: tl.constexpr,
                    IS_VARLEN: tl.constexpr, SAMPLES: tl.constexpr, STORE_H: tl.constexpr, PREC: tl.constexpr):
    """The inter-chunk recurrence over one sequence and a block of value columns: U = Ũ − W S per chunk,
    then S ← e^{G_C} S + Xᵀ diag(e^{G_C − G}) U. Stores every chunk's entry state when asked."""
    i_v, i_nh = tl.program_id(0), tl.program_id(1)
    i_n, i_h, bos, T_n, base, offs_k, offs_v, m_kv, p_S = state_tile(0, i_v, i_nh, cu_ptr, coff_ptr, T, H, Dk, Dv,
                                                                     C, BK, BV, IS_VARLEN)
    mk, mv = offs_k < Dk, offs_v < Dv
    S = tl.load(S0_ptr + (i_n * H + i_h) * Dk * Dv + p_S, mask=m_kv, other=0.0)
    r = tl.arange(0, C)
    for i_c in range(0, tl.cdiv(T_n, C)):
        if STORE_H:
            tl.store(h_ptr + ((base + i_c) * H + i_h) * Dk * Dv + p_S, S, mask=m_kv)
        t = i_c * C + r
        valid = t < T_n
        rows = bos + t
        m_v = valid[:, None] & mv[None, :]
        w = tl.load(W_ptr + (rows * H + i_h)[:, None] * Dk + offs_k[None, :], mask=valid[:, None] & mk[None, :],
                    other=0.0)
        ut = tl.load(Ut_ptr + (rows * H + i_h)[:, None] * Dv + offs_v[None, :], mask=m_v, other=0.0)
        u = ut - mm(w, S, PREC)
        tl.store(U_ptr + (rows * H + i_h)[:, None] * Dv + offs_v[None, :], u, mask=m_v)
        G = tl.load(G_ptr + rows * H + i_h, mask=valid, other=0.0)
        last = tl.minimum(C, T_n - i_c * C) - 1
        G_last = tl.load(G_ptr + (bos + i_c * C + last) * H + i_h)
        x = load_pairs(k_ptr, lk_ptr, bos, t, T_n, i_n, i_h, offs_k, H, Dk, SHIFTED, FRESH)
        carry = tl.where(valid, tl.exp(tl.where(valid, G_last - G, 0.0)), 0.0)
        keep = tl.exp(G_last)
        if SAMPLES:  # the exit state is the last token's sample's: the carried one only if that is its sample
            sid, prev, sid_last, opens = chunk_samples(sid_ptr, i_n, i_c, t, T, C)
            x = cut_pairs(x, opens, SHIFTED)
            carry = tl.where(sid == sid_last, carry, 0.0)
            keep = tl.where(sid_last == prev, keep, 0.0)
        S = keep * S + mm(tl.trans(x), carry[:, None] * u, PREC)
    tl.store(Sf_ptr + (i_n * H + i_h) * Dk * Dv + p_S, S, mask=m_kv)


@triton.jit
def f1_intra_kernel(q_ptr, k_ptr, lk_ptr, h_ptr, src_ptr, G_ptr, g_ptr, cu_ptr, cidx_ptr, sid_ptr, out_ptr, T, NT,
                    H: tl.constexpr, Dk: tl.constexpr, Dv: tl.constexpr, C: tl.constexpr,
                    BK: tl.constexpr, BV: tl.constexpr, SHIFTED: tl.constexpr, FRESH: tl.constexpr,
                    RBW: tl.constexpr, BACKWARD: tl.constexpr, IS_VARLEN: tl.constexpr, SAMPLES: tl.constexpr,
                    PREC: tl.constexpr):
    """Forward: o = diag(e^{Gr}) Q S + (M ⊙ Q Xᵀ) U from src = U.
    Backward: the chunk-local part of dU, (M ⊙ Q Xᵀ)ᵀ dO from src = dO (fp32 out)."""
    i_v, pid, i_h = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_n, i_c = chunk_of(pid, cidx_ptr, NT, IS_VARLEN)
    bos, T_n = seq_bounds(i_n, cu_ptr, T, IS_VARLEN)
    r = tl.arange(0, C)
    t = i_c * C + r
    valid = t < T_n
    rows = bos + t
    offs_v = i_v * BV + tl.arange(0, BV)
    mv = offs_v < Dv
    if SAMPLES:
        sid, prev, _, opens = chunk_samples(sid_ptr, i_n, i_c, t, T, C)
    qx = tl.zeros([C, C], dtype=tl.float32)
    qs = tl.zeros([C, BV], dtype=tl.float32)
    for i_k in range(0, tl.cdiv(Dk, BK)):
        offs_k = i_k * BK + tl.arange(0, BK)
        mk = offs_k < Dk
        qk = tl.load(q_ptr + (rows * H + i_h)[:, None] * Dk + offs_k[None, :], mask=valid[:, None] & mk[None, :],
                     other=0.0).to(tl.float32)
        x = load_pairs(k_ptr, lk_ptr, bos, t, T_n, i_n, i_h, offs_k, H, Dk, SHIFTED, FRESH)
        if SAMPLES:
            x = cut_pairs(x, opens, SHIFTED)
        qx += mm(qk, tl.trans(x), PREC)
        if not BACKWARD:
            S = tl.load(h_ptr + (pid * H + i_h) * Dk * Dv + offs_k[:, None] * Dv + offs_v[None, :],
                        mask=mk[:, None] & mv[None, :], other=0.0)
            qs += mm(qk, S, PREC)
    G = tl.load(G_ptr + rows * H + i_h, mask=valid, other=0.0)
    if RBW:
        Gr = G - tl.load(g_ptr + rows * H + i_h, mask=valid, other=0.0)
        mask = (r[:, None] > r[None, :])
    else:
        Gr = G
        mask = (r[:, None] >= r[None, :])
    mask = mask & valid[:, None] & valid[None, :]
    if SAMPLES:
        mask = mask & (sid[:, None] == sid[None, :])
    mq = tl.where(mask, tl.exp(tl.where(mask, Gr[:, None] - G[None, :], 0.0)), 0.0) * qx
    m = valid[:, None] & mv[None, :]
    src = tl.load(src_ptr + (rows * H + i_h)[:, None] * Dv + offs_v[None, :], mask=m, other=0.0).to(tl.float32)
    if BACKWARD:
        tl.store(out_ptr + (rows * H + i_h)[:, None] * Dv + offs_v[None, :], mm(tl.trans(mq), src, PREC), mask=m)
    else:
        read = tl.exp(Gr)
        if SAMPLES:  # only the tokens of the carried state's sample read it
            read = tl.where(sid == prev, read, 0.0)
        o = read[:, None] * qs + mm(mq, src, PREC)
        tl.store(out_ptr + (rows * H + i_h)[:, None] * Dv + offs_v[None, :], o.to(out_ptr.dtype.element_ty),
                 mask=m)
