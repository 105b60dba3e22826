"""falcon-2 forward and state gradients in Triton: one batched per-channel solve sharing the chunk Gram.

Every value column j has its own step η_{t,j} and carry γ_{t,j}, so inside a chunk (entered with state S)
column j of the pseudo-values solves its own unit-lower-triangular system (paper Algorithm 1, appendix F)

    u_{t,j} + η_{t,j} Σ_{s<t} e^{Gp_{t,j} − G_{s,j}} (x_tᵀ x_s) u_{s,j} = η_{t,j} (y_{t,j} − e^{Gp_{t,j}} (Sᵀ x_t)_j),

all sharing the Gram X Xᵀ. The chunks are 16 tokens long and a program holds a block of columns: the solve
is a 16-step substitution over a ``[16, BV]`` tile and the per-channel decay of the outputs a
``[16, 16, BV]`` tile, with ratios e^{G_t − G_s} formed only for s ≤ t. The state passes through the chunks
sequentially, and the solve takes one of three forms (``triton_launch.F2_SOLVE``):

- sequential: the sequential pass walks each chunk's 16-step substitution and writes the outputs;
  no per-channel inverse is ever stored;
- outputs-apart: the same pass stores U and the chunk entry states, and ``f2_out_kernel`` writes the outputs from
  them for every chunk at once, so the ``[16, 16, BV]`` read tile leaves the sequential loop;
- inverses (the default): the systems depend on the pairs and gates, not on the state, so ``f2_inverse_kernel``
  forms every chunk's per-column inverses (I + L_j)⁻¹ at once (``[chunks, H, 16, 16, Dv]`` fp32, for the call
  only); the sequential pass then applies them (one ``[16, 16, BV]`` product where the substitution took 15
  dependent steps), and the outputs come from ``f2_out_kernel``. The backward's reverse pass applies the
  transposed inverses the same way.

``SAMPLES`` runs rows of fresh samples told apart by their ids (``sid_ptr``, ``[B, T]``) in full chunks, as falcon-1's
kernels do: a sample's first token writes no pair (shifted), the systems and the reads are masked to pairs of one
sample (each column's inverse is block diagonal by sample), only the carried state's sample reads and corrects
against it, and the exit state keeps it only when the chunk's last token is still of its sample, plus the writes of
the last token's sample. The prefixes G stay the chunk's: every decay the masks leave is a difference within one
sample, or (the carried state's reads, its exit factor) a prefix of the sample the chunk began in.
"""

from __future__ import annotations

import triton
import triton.language as tl

from falcon_lab.kernels.common.triton_helpers import (chunk_of, chunk_samples, cut_pairs, gates, is_pair, load_pairs,
                                                      mm, pair_apart, seq_bounds, state_tile)


@triton.jit
def f2_samples(sid_ptr, i_n, i_c, t, T, C: tl.constexpr, SAMPLES: tl.constexpr):
    """Per token its sample id, the id of the carried state's sample, the chunk's last token's, and whether the
    token opens a sample (one sample a row, none opening, without ``SAMPLES``)."""
    if SAMPLES:
        sid, prev, last, opens = chunk_samples(sid_ptr, i_n, i_c, t, T, C)
    else:
        sid = t * 0
        prev = 0
        last = 0
        opens = t < 0
    return sid, prev, last, opens


@triton.jit
def f2_pairs(k_ptr, lk_ptr, sid_ptr, bos, T_n, i_c, i_n, i_h, H: tl.constexpr, Dk: tl.constexpr, C: tl.constexpr,
             BK: tl.constexpr, SHIFTED: tl.constexpr, FRESH: tl.constexpr, PREC: tl.constexpr,
             SAMPLES: tl.constexpr):
    """A chunk's write pairs: its rows, the keys x, their energies and the Gram X Xᵀ; and its samples
    (``f2_samples``)."""
    r = tl.arange(0, C)
    t = i_c * C + r
    valid = t < T_n
    rows = bos + t
    offs_k = tl.arange(0, BK)
    sid, prev, last, opens = f2_samples(sid_ptr, i_n, i_c, t, T_n, C, SAMPLES)
    x = load_pairs(k_ptr, lk_ptr, bos, t, T_n, i_n, i_h, offs_k, H, Dk, SHIFTED, FRESH)
    if SAMPLES:
        x = cut_pairs(x, opens, SHIFTED)
    energy = tl.sum(x * x, 1)
    gram = mm(x, tl.trans(x), PREC)
    return r, t, valid, rows, offs_k, x, energy, gram, sid, prev, last, opens


@triton.jit
def f2_front(q_ptr, k_ptr, lk_ptr, sid_ptr, bos, T_n, i_c, i_n, i_h, H: tl.constexpr, Dk: tl.constexpr,
             C: tl.constexpr, BK: tl.constexpr, SHIFTED: tl.constexpr, FRESH: tl.constexpr, PREC: tl.constexpr,
             SAMPLES: tl.constexpr):
    """What every column block of a chunk shares: pairs, queries, energies, the Gram X Xᵀ and Q Xᵀ, its samples."""
    r, t, valid, rows, offs_k, x, energy, gram, sid, prev, last, opens = f2_pairs(
        k_ptr, lk_ptr, sid_ptr, bos, T_n, i_c, i_n, i_h, H, Dk, C, BK, SHIFTED, FRESH, PREC, SAMPLES)
    qk = tl.load(q_ptr + (rows * H + i_h)[:, None] * Dk + offs_k[None, :],
                 mask=valid[:, None] & (offs_k < Dk)[None, :], other=0.0).to(tl.float32)
    qx = mm(qk, tl.trans(x), PREC)
    return r, t, valid, rows, x, qk, energy, gram, qx, sid, prev, last, opens


@triton.jit
def f2_gates(v_ptr, beta_ptr, lam_ptr, rows, t, valid, energy, i_h, offs_v, eps, floor, H: tl.constexpr,
             Dv: tl.constexpr, C: tl.constexpr, SHIFTED: tl.constexpr, FRESH: tl.constexpr,
             NORMALIZE: tl.constexpr, COUPLED: tl.constexpr, RBW: tl.constexpr, opens, SAMPLES: tl.constexpr):
    """Targets and per-column gates of a column block: η, g, the prefixes G, Gp, Gr and the chunk's last G."""
    r = tl.arange(0, C)
    m_v = valid[:, None] & (offs_v < Dv)[None, :]
    y = tl.load(v_ptr + (rows * H + i_h)[:, None] * Dv + offs_v[None, :], mask=m_v, other=0.0).to(tl.float32)
    beta = tl.load(beta_ptr + (rows * H + i_h)[:, None] * Dv + offs_v[None, :], mask=m_v,
                   other=0.0).to(tl.float32)
    lam = tl.load(lam_ptr + rows * H + i_h, mask=valid, other=0.0).to(tl.float32)
    pair = is_pair(t, valid, SHIFTED, FRESH)
    if SAMPLES:
        pair = pair_apart(pair, opens, SHIFTED)
    eta, g = gates(beta, lam[:, None], energy[:, None], pair[:, None], eps, floor, NORMALIZE, COUPLED)
    G = tl.cumsum(g, 0)
    Gp = G - g
    G_last = tl.sum(tl.where(r[:, None] == C - 1, G, 0.0), 0)  # padded rows have g = 0
    Gr = Gp if RBW else G
    return y, beta, lam, pair, eta, G, Gp, G_last, Gr


@triton.jit
def read_decay(G, Gr, valid, C: tl.constexpr, RBW: tl.constexpr, sid):
    """``[C, C, BV]``: e^{Gr_t − G_s} per column where token t reads token s's write (s ≤ t RAW, s < t RBW; s of
    t's sample)."""
    r = tl.arange(0, C)
    if RBW:
        m = r[:, None] > r[None, :]
    else:
        m = r[:, None] >= r[None, :]
    m = (m & valid[:, None] & valid[None, :] & (sid[:, None] == sid[None, :]))[:, :, None]
    return tl.where(m, tl.exp(tl.where(m, Gr[:, None, :] - G[None, :, :], 0.0)), 0.0)


@triton.jit
def solve_decay(G, Gp, valid, C: tl.constexpr, sid):
    """``[C, C, BV]``: e^{Gp_t − G_s} per column for s < t of t's sample, the decay inside the system matrix."""
    r = tl.arange(0, C)
    m = ((r[:, None] > r[None, :]) & valid[:, None] & valid[None, :] & (sid[:, None] == sid[None, :]))[:, :, None]
    return tl.where(m, tl.exp(tl.where(m, Gp[:, None, :] - G[None, :, :], 0.0)), 0.0)


@triton.jit
def inverse_tile(chunk, i_h, H: tl.constexpr, C: tl.constexpr, Dv: tl.constexpr, offs_v):
    """Offsets of a chunk's ``[C, C, BV]`` block of per-column inverses in a ``[chunks, H, C, C, Dv]`` buffer."""
    r = tl.arange(0, C)
    head = (chunk * H + i_h).to(tl.int64)
    return ((head * C + r[:, None, None]) * C + r[None, :, None]) * Dv + offs_v[None, None, :]


@triton.jit
def system_inverse(gram, eta, G, Gp, valid, C: tl.constexpr, sid):
    """``[C, C, BV]``: (I + L_j)⁻¹ for every column j, L_j[t, s] = η_{t,j} e^{Gp_{t,j} − G_{s,j}} x_tᵀ x_s (s < t),
    built row by row: row i is e_i − Σ_{s<i} L_j[i, s] row s."""
    r = tl.arange(0, C)
    L = solve_decay(G, Gp, valid, C, sid) * gram[:, :, None] * eta[:, None, :]
    inv = tl.where((r[:, None] == r[None, :])[:, :, None], 1.0, 0.0) + tl.zeros_like(L)
    for i in range(1, C):
        sel = (r == i)[:, None, None]
        l_i = tl.sum(tl.where(sel, L, 0.0), 0)  # [C, BV]: row i of L_j, zero from column i on
        inv = tl.where(sel, inv - tl.sum(l_i[:, None, :] * inv, 0)[None, :, :], inv)
    return inv


@triton.jit
def f2_inverse_kernel(k_ptr, v_ptr, beta_ptr, lam_ptr, lk_ptr, cu_ptr, cidx_ptr, sid_ptr, Ti_ptr, T, NT, eps, floor,
                      H: tl.constexpr, Dk: tl.constexpr, Dv: tl.constexpr, C: tl.constexpr, BK: tl.constexpr,
                      BV: tl.constexpr, SHIFTED: tl.constexpr, FRESH: tl.constexpr, NORMALIZE: tl.constexpr,
                      COUPLED: tl.constexpr, IS_VARLEN: tl.constexpr, PREC: tl.constexpr, SAMPLES: tl.constexpr):
    """Every chunk at once: the inverses of its per-column systems, which depend on the pairs and gates alone
    (not on the state), so the sequential pass only applies them."""
    pid, i_h, i_v = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_n, i_c = chunk_of(pid, cidx_ptr, NT, IS_VARLEN)
    bos, T_n = seq_bounds(i_n, cu_ptr, T, IS_VARLEN)
    r, t, valid, rows, offs_k, x, energy, gram, sid, prev, last, opens = f2_pairs(
        k_ptr, lk_ptr, sid_ptr, bos, T_n, i_c, i_n, i_h, H, Dk, C, BK, SHIFTED, FRESH, PREC, SAMPLES)
    offs_v = i_v * BV + tl.arange(0, BV)
    y, beta, lam, pair, eta, G, Gp, G_last, Gr = f2_gates(v_ptr, beta_ptr, lam_ptr, rows, t, valid, energy, i_h,
                                                          offs_v, eps, floor, H, Dv, C, SHIFTED, FRESH, NORMALIZE,
                                                          COUPLED, False, opens, SAMPLES)
    inv = system_inverse(gram, eta, G, Gp, valid, C, sid)
    tl.store(Ti_ptr + inverse_tile(pid, i_h, H, C, Dv, offs_v), inv, mask=(offs_v < Dv)[None, None, :])


@triton.jit
def f2_out_kernel(q_ptr, k_ptr, v_ptr, beta_ptr, lam_ptr, lk_ptr, U_ptr, h_ptr, cu_ptr, cidx_ptr, sid_ptr, o_ptr, T,
                  NT, eps, floor, H: tl.constexpr, Dk: tl.constexpr, Dv: tl.constexpr, C: tl.constexpr,
                  BK: tl.constexpr, BV: tl.constexpr, SHIFTED: tl.constexpr, FRESH: tl.constexpr,
                  NORMALIZE: tl.constexpr, COUPLED: tl.constexpr, RBW: tl.constexpr, IS_VARLEN: tl.constexpr,
                  PREC: tl.constexpr, SAMPLES: tl.constexpr):
    """Every chunk at once: the outputs from the chunk's entry state and its pseudo-values,
    o_t = e^{Gr_t} ⊙ Sᵀ q_t + Σ_s (q_tᵀ x_s) e^{Gr_t − G_s} ⊙ u_s."""
    pid, i_h, i_v = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_n, i_c = chunk_of(pid, cidx_ptr, NT, IS_VARLEN)
    bos, T_n = seq_bounds(i_n, cu_ptr, T, IS_VARLEN)
    r, t, valid, rows, x, qk, energy, gram, qx, sid, prev, last, opens = f2_front(
        q_ptr, k_ptr, lk_ptr, sid_ptr, bos, T_n, i_c, i_n, i_h, H, Dk, C, BK, SHIFTED, FRESH, PREC, SAMPLES)
    offs_v = i_v * BV + tl.arange(0, BV)
    offs_k = tl.arange(0, BK)
    mv = offs_v < Dv
    y, beta, lam, pair, eta, G, Gp, G_last, Gr = f2_gates(v_ptr, beta_ptr, lam_ptr, rows, t, valid, energy, i_h,
                                                          offs_v, eps, floor, H, Dv, C, SHIFTED, FRESH, NORMALIZE,
                                                          COUPLED, RBW, opens, SAMPLES)
    m_v = valid[:, None] & mv[None, :]
    p_v = (rows * H + i_h)[:, None] * Dv + offs_v[None, :]
    u = tl.load(U_ptr + p_v, mask=m_v, other=0.0)
    S = tl.load(h_ptr + (pid * H + i_h).to(tl.int64) * Dk * Dv + offs_k[:, None] * Dv + offs_v[None, :],
                mask=(offs_k < Dk)[:, None] & mv[None, :], other=0.0)
    read = tl.where((valid & (sid == prev))[:, None], tl.exp(Gr), 0.0)
    o = read * mm(qk, S, PREC) + tl.sum(qx[:, :, None] * read_decay(G, Gr, valid, C, RBW, sid) * u[None, :, :], 1)
    tl.store(o_ptr + p_v, o.to(o_ptr.dtype.element_ty), mask=m_v)


@triton.jit
def f2_fwd_kernel(q_ptr, k_ptr, v_ptr, beta_ptr, lam_ptr, lk_ptr, S0_ptr, cu_ptr, coff_ptr, sid_ptr, Ti_ptr, o_ptr,
                  U_ptr, h_ptr, Sf_ptr, T, eps, floor, H: tl.constexpr, Dk: tl.constexpr, Dv: tl.constexpr,
                  C: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, SHIFTED: tl.constexpr, FRESH: tl.constexpr,
                  NORMALIZE: tl.constexpr, COUPLED: tl.constexpr, RBW: tl.constexpr, WRITE_O: tl.constexpr,
                  STORE: tl.constexpr, INVERSE: tl.constexpr, IS_VARLEN: tl.constexpr, PREC: tl.constexpr,
                  SAMPLES: tl.constexpr):
    """One sequence, a block of value columns, chunk after chunk: solve, read, carry the state. STORE keeps
    U and every chunk's entry state (for the backward, or for ``f2_out_kernel``). INVERSE applies the
    per-column inverses of ``f2_inverse_kernel`` in place of the substitution."""
    i_v, i_nh = tl.program_id(0), tl.program_id(1)
    i_n, i_h, bos, T_n, base, offs_k, offs_v, m_kv, p_S = state_tile(0, i_v, i_nh, cu_ptr, coff_ptr, T, H, Dk, Dv,
                                                                     C, BK, BV, IS_VARLEN)
    mv = offs_v < Dv
    S = tl.load(S0_ptr + (i_n * H + i_h) * Dk * Dv + p_S, mask=m_kv, other=0.0)
    for i_c in range(0, tl.cdiv(T_n, C)):
        r, t, valid, rows, _, x, energy, gram, sid, prev, last, opens = f2_pairs(
            k_ptr, lk_ptr, sid_ptr, bos, T_n, i_c, i_n, i_h, H, Dk, C, BK, SHIFTED, FRESH, PREC, SAMPLES)
        y, beta, lam, pair, eta, G, Gp, G_last, Gr = f2_gates(v_ptr, beta_ptr, lam_ptr, rows, t, valid, energy,
                                                              i_h, offs_v, eps, floor, H, Dv, C, SHIFTED, FRESH,
                                                              NORMALIZE, COUPLED, RBW, opens, SAMPLES)
        m_v = valid[:, None] & mv[None, :]
        # only the carried state's sample corrects against it
        U = eta * (y - tl.where((sid == prev)[:, None], tl.exp(Gp), 0.0) * mm(x, S, PREC))
        if INVERSE:
            inv = tl.load(Ti_ptr + inverse_tile(base + i_c, i_h, H, C, Dv, offs_v), mask=mv[None, None, :],
                          other=0.0)
            U = tl.sum(inv * U[None, :, :], 1)
        else:
            for i in range(1, C):  # forward substitution, every column at once
                sel = r[:, None] == i
                k_i = tl.sum(tl.where(sel, gram, 0.0), 0)
                gp_i = tl.sum(tl.where(sel, Gp, 0.0), 0)
                eta_i = tl.sum(tl.where(sel, eta, 0.0), 0)
                before = r < i
                if SAMPLES:  # within token i's sample
                    before = before & (sid == tl.sum(tl.where(r == i, sid, 0), 0))
                before = before[:, None]
                dec = tl.where(before, tl.exp(tl.where(before, gp_i[None, :] - G, 0.0)), 0.0)
                acc = tl.sum(k_i[:, None] * dec * U, 0)
                U = tl.where(sel, U - (eta_i * acc)[None, :], U)
        p_v = (rows * H + i_h)[:, None] * Dv + offs_v[None, :]
        if WRITE_O:  # the queries are read only here: with the outputs apart, the loop never loads them
            qk = tl.load(q_ptr + (rows * H + i_h)[:, None] * Dk + offs_k[None, :],
                         mask=valid[:, None] & (offs_k < Dk)[None, :], other=0.0).to(tl.float32)
            qx = mm(qk, tl.trans(x), PREC)
            read = tl.where((valid & (sid == prev))[:, None], tl.exp(Gr), 0.0)
            o = read * mm(qk, S, PREC) + tl.sum(qx[:, :, None] * read_decay(G, Gr, valid, C, RBW, sid) * U[None, :, :],
                                                1)
            tl.store(o_ptr + p_v, o.to(o_ptr.dtype.element_ty), mask=m_v)
        if STORE:
            tl.store(U_ptr + p_v, U, mask=m_v)
            tl.store(h_ptr + ((base + i_c) * H + i_h) * Dk * Dv + p_S, S, mask=m_kv)
        carry = tl.where((valid & (sid == last))[:, None], tl.exp(G_last[None, :] - G), 0.0)
        S = tl.where(last == prev, tl.exp(G_last), 0.0)[None, :] * S + mm(tl.trans(x), carry * U, PREC)
    tl.store(Sf_ptr + (i_n * H + i_h) * Dk * Dv + p_S, S, mask=m_kv)


@triton.jit
def f2_dstate_kernel(q_ptr, k_ptr, v_ptr, beta_ptr, lam_ptr, lk_ptr, do_ptr, U_ptr, dSf_ptr, cu_ptr, coff_ptr,
                     sid_ptr, Ti_ptr, dh_ptr, dB_ptr, dS0_ptr, T, eps, floor, H: tl.constexpr, Dk: tl.constexpr,
                     Dv: tl.constexpr, C: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
                     SHIFTED: tl.constexpr, FRESH: tl.constexpr, NORMALIZE: tl.constexpr, COUPLED: tl.constexpr,
                     RBW: tl.constexpr, HAS_DSF: tl.constexpr, INVERSE: tl.constexpr, IS_VARLEN: tl.constexpr,
                     PREC: tl.constexpr, SAMPLES: tl.constexpr):
    """The reverse recurrence: per chunk dU, the per-column transposed solve dB = A_jᵀ dU (back substitution,
    or INVERSE: the transposed inverses of ``f2_inverse_kernel`` applied), and the entry state's gradient;
    stores every chunk's exit-state gradient, dB and the initial state's gradient."""
    i_v, i_nh = tl.program_id(0), tl.program_id(1)
    i_n, i_h, bos, T_n, base, offs_k, offs_v, m_kv, p_S = state_tile(0, i_v, i_nh, cu_ptr, coff_ptr, T, H, Dk, Dv,
                                                                     C, BK, BV, IS_VARLEN)
    mv = offs_v < Dv
    if HAS_DSF:
        dS = tl.load(dSf_ptr + (i_n * H + i_h) * Dk * Dv + p_S, mask=m_kv, other=0.0)
    else:
        dS = tl.zeros([BK, BV], dtype=tl.float32)
    for i_c in range(tl.cdiv(T_n, C) - 1, -1, -1):
        tl.store(dh_ptr + ((base + i_c) * H + i_h) * Dk * Dv + p_S, dS, mask=m_kv)
        r, t, valid, rows, x, qk, energy, gram, qx, sid, prev, last, opens = f2_front(
            q_ptr, k_ptr, lk_ptr, sid_ptr, bos, T_n, i_c, i_n, i_h, H, Dk, C, BK, SHIFTED, FRESH, PREC, SAMPLES)
        y, beta, lam, pair, eta, G, Gp, G_last, Gr = f2_gates(v_ptr, beta_ptr, lam_ptr, rows, t, valid, energy,
                                                              i_h, offs_v, eps, floor, H, Dv, C, SHIFTED, FRESH,
                                                              NORMALIZE, COUPLED, RBW, opens, SAMPLES)
        m_v = valid[:, None] & mv[None, :]
        p_v = (rows * H + i_h)[:, None] * Dv + offs_v[None, :]
        do = tl.load(do_ptr + p_v, mask=m_v, other=0.0).to(tl.float32)
        carry = tl.where((valid & (sid == last))[:, None], tl.exp(G_last[None, :] - G), 0.0)
        dB = tl.sum(qx[:, :, None] * read_decay(G, Gr, valid, C, RBW, sid) * do[:, None, :], 0)
        dB += carry * mm(x, dS, PREC)
        if INVERSE:
            inv = tl.load(Ti_ptr + inverse_tile(base + i_c, i_h, H, C, Dv, offs_v), mask=mv[None, None, :],
                          other=0.0)
            dB = tl.sum(inv * dB[:, None, :], 0)
        else:
            for j in range(1, C):  # back substitution with (I + L_j)ᵀ, rows C−2 .. 0
                i = C - 1 - j
                sel = r[:, None] == i
                k_i = tl.sum(tl.where(sel, gram, 0.0), 0)
                g_i = tl.sum(tl.where(sel, G, 0.0), 0)
                after = r > i
                if SAMPLES:  # within token i's sample
                    after = after & (sid == tl.sum(tl.where(r == i, sid, 0), 0))
                after = after[:, None]
                dec = tl.where(after, tl.exp(tl.where(after, Gp - g_i[None, :], 0.0)), 0.0)
                acc = tl.sum(k_i[:, None] * eta * dec * dB, 0)
                dB = tl.where(sel, dB - acc[None, :], dB)
        tl.store(dB_ptr + p_v, dB, mask=m_v)
        mine = (valid & (sid == prev))[:, None]  # the carried state's sample's tokens
        read = tl.where(mine, tl.exp(Gr), 0.0)
        write = tl.where(mine, eta * tl.exp(Gp), 0.0)
        dS = (tl.where(last == prev, tl.exp(G_last), 0.0)[None, :] * dS + mm(tl.trans(qk), read * do, PREC)
              - mm(tl.trans(x), write * dB, PREC))
    tl.store(dS0_ptr + (i_n * H + i_h) * Dk * Dv + p_S, dS, mask=m_kv)
