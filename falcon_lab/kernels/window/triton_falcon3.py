"""falcon-3 forward in Triton: the block-strict UT transform per chunk, the state pass, the reads at each token.

Token i of a chunk writes a rank-≤W update over its W window slots (``falcon_lab/kernels/window/solve.py``):

    S_i = γ_i S_{i−1} + Σ_j x_{i,j} u_{i,j}ᵀ,    u_{i,j} = a_i (v_{i,j} − S_{i−1}ᵀ x_{i,j}),    a_i = η_i / B_i.

The kernels see the slots as rows: token i's slot j is row i·WP + j of ``[B, T·WP, H, D]`` slot arrays (the window
padded to WP, a power of two, with x = v = 0 slots that write nothing). A chunk holds C tokens and R = C·WP rows.
With chunk-local log-prefixes G_i = Σ_{r≤i} log γ_r and Gp_i = G_i − log γ_i (a row takes its token's), the
chunk's pseudo-values solve, from its entry state S,

    (I + L) U = diag(a) (V − diag(e^{Gp}) X S),    L[p, s] = a_p e^{Gp_p − G_s} x_pᵀ x_s  for token(s) < token(p),

block-strict: slots of one token do not couple. With A = (I + L)⁻¹ (the UT transform, ``unit_lower_inverse`` of
the falcon-1 kernels), Wm = A diag(a e^{Gp}) X and Ũ = A diag(a) V, U = Ũ − Wm S. The reads are per token:

    o_i = e^{Gr_i} q_iᵀ S + Σ_s e^{Gr_i − G_s} (q_i · x_s) u_s    (RAW: token(s) ≤ i, Gr = G; RBW: < i, Gr = Gp)

and the exit state is e^{G_last} S + Xᵀ diag(e^{G_last − G}) U. Decay differences are masked to s ≤ i before the
exponential. Tokens are held in tiles of CT = max(C, 16) (the least ``tl.dot`` size), the rows past C masked.

``SAMPLES`` runs rows of fresh samples told apart by their ids (``sid_ptr``, ``[B, T]``; the slots hold only pairs of
their token's own sample, zero elsewhere) in full chunks, as falcon-1's kernels do: the prefixes G restart at each
sample, L and the reads are masked to rows of one sample (A is block diagonal by sample), only the tokens of the
carried state's sample read it (and Wm's other rows are 0), and the exit state keeps the carried one only when the
chunk's last token is still of its sample, plus the writes of the last token's sample (G_last its prefix).
"""

from __future__ import annotations

import triton
import triton.language as tl

from falcon_lab.kernels.common.triton_helpers import chunk_samples, load_rows, mm, sample_cumsum
from falcon_lab.kernels.regression.triton_f1 import unit_lower_inverse

# T and NT change with every batch of packed samples (the runs of like lengths are padded to their own longest):
# specialised (an int divisible by 16 or not), a batch bringing a new pair compiled the five kernels again in the
# middle of training (at the same-time table's size the first of the bench's timed steps brought one); not
# specialised, they are compiled once
PER_BATCH = ["T", "NT"]


@triton.jit
def chunk_tiles(pid, NT, T, C: tl.constexpr, CT: tl.constexpr, R: tl.constexpr, WP: tl.constexpr):
    """Sequence n and chunk c of the ``pid``-th chunk; its token tile (local index, sequence position or −1 where
    masked, validity) and its slot-row tile (local row, the row's token, validity)."""
    i_n, i_c = pid // NT, pid % NT
    rt = tl.arange(0, CT)
    vt = (rt < C) & (i_c * C + rt < T)
    tt = tl.where(vt, i_c * C + rt, -1)
    rp = tl.arange(0, R)
    tp = i_c * C + rp // WP
    vp = tp < T
    return i_n, i_c, rt, tt, vt, rp, tp, vp


@triton.jit
def chunk_ids(sid_ptr, i_n, i_c, T, C: tl.constexpr, rt, tp, SAMPLES: tl.constexpr):
    """Per token and per row (its token's) the sample id, the id of the sample the carried state belongs to and that
    of the chunk's last token (all 0 without ``SAMPLES``: one sample a row)."""
    if SAMPLES:
        sid_t, prev, last, _ = chunk_samples(sid_ptr, i_n, i_c, i_c * C + rt, T, C)
        sid_p = tl.load(sid_ptr + i_n * T + tl.minimum(tp, T - 1))
    else:
        sid_t = rt * 0
        sid_p = tp * 0
        prev = 0
        last = 0
    return sid_t, sid_p, prev, last


@triton.jit
def chunk_gates(a_ptr, g_ptr, i_n, i_h, T, H: tl.constexpr, rt, tt, vt, rp, tp, vp, WP: tl.constexpr, sid_t, last,
                SAMPLES: tl.constexpr):
    """Per token: log γ and G; per row: a, log γ and G (its token's); G_last, the prefix of the chunk's last token
    (its sample's, with ``SAMPLES``: G restarts at each sample)."""
    g_t = tl.load(g_ptr + (i_n * T + tt) * H + i_h, mask=vt, other=0.0)
    a_p = tl.load(a_ptr + (i_n * T + tp) * H + i_h, mask=vp, other=0.0)
    g_p = tl.load(g_ptr + (i_n * T + tp) * H + i_h, mask=vp, other=0.0)
    if SAMPLES:
        G_t = sample_cumsum(g_t, sid_t, rt)
        own = (rp[None, :] // WP == rt[:, None]) & vp[None, :]  # [CT, R]: token i's slots
        G_p = tl.sum(tl.where(own, G_t[:, None], 0.0), 0)
        G_last = tl.sum(tl.where(vt & (sid_t == last), g_t, 0.0), 0)
    else:
        G_t = tl.cumsum(g_t, 0)
        G_p = tl.cumsum(tl.where(rp % WP == 0, g_p, 0.0), 0)  # the first slot of each token adds its log γ
        G_last = tl.sum(g_t, 0)
    return g_t, G_t, a_p, g_p, G_p, G_last


@triton.jit
def read_mask(G_t, g_t, G_p, tt, vt, tp, vp, sid_t, sid_p, RBW: tl.constexpr):
    """``[CT, R]`` read decays e^{Gr_i − G_s} over the rows a token reads (masked first), and Gr per token."""
    if RBW:
        Gr = G_t - g_t
        keep = tp[None, :] < tt[:, None]
    else:
        Gr = G_t
        keep = tp[None, :] <= tt[:, None]
    keep = keep & vt[:, None] & vp[None, :] & (sid_t[:, None] == sid_p[None, :])
    return tl.where(keep, tl.exp(tl.where(keep, Gr[:, None] - G_p[None, :], 0.0)), 0.0), Gr


@triton.jit
def write_mask(G_p, g_p, tp, vp, sid_p):
    """``[R, R]`` decays e^{Gp_p − G_s} of the block-strict system (token(s) < token(p), one sample), 0 elsewhere."""
    strict = (tp[:, None] > tp[None, :]) & vp[:, None] & vp[None, :] & (sid_p[:, None] == sid_p[None, :])
    return tl.where(strict, tl.exp(tl.where(strict, (G_p - g_p)[:, None] - G_p[None, :], 0.0)), 0.0), strict


@triton.jit
def exit_gates(G_last, G_p, vp, sid_p, prev, last):
    """The exit state's factors: per row e^{G_last − G} (the rows of the last token's sample), and e^{G_last} on the
    carried state (0 when a sample opened since)."""
    carry = tl.where(vp & (sid_p == last), tl.exp(tl.where(vp, G_last - G_p, 0.0)), 0.0)
    return carry, tl.where(last == prev, tl.exp(G_last), 0.0)


@triton.jit(do_not_specialize=PER_BATCH)
def f3_prep_kernel(x_ptr, v_ptr, a_ptr, g_ptr, sid_ptr, A_ptr, W_ptr, Ut_ptr, T, NT,
                   H: tl.constexpr, Dk: tl.constexpr, Dv: tl.constexpr, C: tl.constexpr, CT: tl.constexpr,
                   R: tl.constexpr, WP: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
                   PREC: tl.constexpr, SOLVE_PREC: tl.constexpr, DOUBLING: tl.constexpr, SAMPLES: tl.constexpr):
    """Per chunk: the UT transform A of the block-strict system, Wm = A diag(a e^{Gp}) X and Ũ = A diag(a) V."""
    pid, i_h = tl.program_id(0), tl.program_id(1)
    i_n, i_c, rt, tt, vt, rp, tp, vp = chunk_tiles(pid, NT, T, C, CT, R, WP)
    sid_t, sid_p, prev, last = chunk_ids(sid_ptr, i_n, i_c, T, C, rt, tp, SAMPLES)
    g_t, G_t, a_p, g_p, G_p, G_last = chunk_gates(a_ptr, g_ptr, i_n, i_h, T, H, rt, tt, vt, rp, tp, vp, WP, sid_t,
                                                  last, SAMPLES)
    bos = i_n * T * WP
    rows = i_c * R + rp
    gram = tl.zeros([R, R], dtype=tl.float32)
    for i_k in range(0, tl.cdiv(Dk, BK)):
        x = load_rows(x_ptr, bos, i_h, rows, T * WP, i_k * BK + tl.arange(0, BK), H, Dk).to(tl.float32)
        gram += mm(x, tl.trans(x), PREC)
    Dl, _ = write_mask(G_p, g_p, tp, vp, sid_p)
    A = unit_lower_inverse(a_p[:, None] * Dl * gram, R, SOLVE_PREC, DOUBLING)
    tl.store(A_ptr + ((bos + rows) * H + i_h)[:, None] * R + rp[None, :], A, mask=vp[:, None])
    # only the rows of the carried state's sample read it (A is block diagonal by sample)
    scale_w = tl.where(sid_p == prev, a_p * tl.exp(G_p - g_p), 0.0)
    for i_k in range(0, tl.cdiv(Dk, BK)):
        offs_k = i_k * BK + tl.arange(0, BK)
        x = load_rows(x_ptr, bos, i_h, rows, T * WP, offs_k, H, Dk).to(tl.float32)
        tl.store(W_ptr + ((bos + rows) * H + i_h)[:, None] * Dk + offs_k[None, :],
                 mm(A, scale_w[:, None] * x, PREC).to(W_ptr.dtype.element_ty),
                 mask=vp[:, None] & (offs_k < Dk)[None, :])
    for i_v in range(0, tl.cdiv(Dv, BV)):
        offs_v = i_v * BV + tl.arange(0, BV)
        y = load_rows(v_ptr, bos, i_h, rows, T * WP, offs_v, H, Dv).to(tl.float32)
        tl.store(Ut_ptr + ((bos + rows) * H + i_h)[:, None] * Dv + offs_v[None, :], mm(A, a_p[:, None] * y, PREC),
                 mask=vp[:, None] & (offs_v < Dv)[None, :])


@triton.jit(do_not_specialize=PER_BATCH)
def f3_state_kernel(x_ptr, a_ptr, g_ptr, sid_ptr, W_ptr, Ut_ptr, S0_ptr, h_ptr, U_ptr, Sf_ptr, T, NT,
                    H: tl.constexpr, Dk: tl.constexpr, Dv: tl.constexpr, C: tl.constexpr, CT: tl.constexpr,
                    R: tl.constexpr, WP: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, PREC: tl.constexpr,
                    SAMPLES: tl.constexpr):
    """The recurrence across chunks of one sequence, for a block of value columns: U = Ũ − Wm S per chunk, then
    S ← e^{G_last} S + Xᵀ diag(e^{G_last − G}) U. Stores every chunk's entry state h and the final state."""
    i_v, i_nh = tl.program_id(0), tl.program_id(1)
    i_n, i_h = i_nh // H, i_nh % H
    offs_k = tl.arange(0, BK)
    offs_v = i_v * BV + tl.arange(0, BV)
    m_kv = (offs_k < Dk)[:, None] & (offs_v < Dv)[None, :]
    p_S = offs_k[:, None] * Dv + offs_v[None, :]
    S = tl.load(S0_ptr + i_nh.to(tl.int64) * Dk * Dv + p_S, mask=m_kv, other=0.0)
    bos = i_n * T * WP
    for i_c in range(0, NT):
        tl.store(h_ptr + ((i_n * NT + i_c) * H + i_h).to(tl.int64) * Dk * Dv + p_S, S, mask=m_kv)
        _, _, rt, tt, vt, rp, tp, vp = chunk_tiles(i_n * NT + i_c, NT, T, C, CT, R, WP)
        sid_t, sid_p, prev, last = chunk_ids(sid_ptr, i_n, i_c, T, C, rt, tp, SAMPLES)
        g_t, G_t, a_p, g_p, G_p, G_last = chunk_gates(a_ptr, g_ptr, i_n, i_h, T, H, rt, tt, vt, rp, tp, vp, WP,
                                                      sid_t, last, SAMPLES)
        rows = i_c * R + rp
        w = load_rows(W_ptr, bos, i_h, rows, T * WP, offs_k, H, Dk).to(tl.float32)
        ut = load_rows(Ut_ptr, bos, i_h, rows, T * WP, offs_v, H, Dv)
        u = ut - mm(w, S, PREC)
        tl.store(U_ptr + ((bos + rows) * H + i_h)[:, None] * Dv + offs_v[None, :], u,
                 mask=vp[:, None] & (offs_v < Dv)[None, :])
        x = load_rows(x_ptr, bos, i_h, rows, T * WP, offs_k, H, Dk).to(tl.float32)
        carry, keep = exit_gates(G_last, G_p, vp, sid_p, prev, last)
        S = keep * S + mm(tl.trans(x), carry[:, None] * u, PREC)
    tl.store(Sf_ptr + i_nh.to(tl.int64) * Dk * Dv + p_S, S, mask=m_kv)


@triton.jit(do_not_specialize=PER_BATCH)
def f3_read_kernel(q_ptr, x_ptr, a_ptr, g_ptr, sid_ptr, h_ptr, src_ptr, out_ptr, T, NT,
                   H: tl.constexpr, Dk: tl.constexpr, Dv: tl.constexpr, C: tl.constexpr, CT: tl.constexpr,
                   R: tl.constexpr, WP: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, RBW: tl.constexpr,
                   BACKWARD: tl.constexpr, PREC: tl.constexpr, SAMPLES: tl.constexpr):
    """Forward: o = diag(e^{Gr}) Q S + (M ⊙ Q Xᵀ) U per token from src = U (slot rows).
    Backward: the chunk-local part of dU, (M ⊙ Q Xᵀ)ᵀ dO per slot row, from src = dO (tokens), fp32."""
    pid, i_v, i_h = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_n, i_c, rt, tt, vt, rp, tp, vp = chunk_tiles(pid, NT, T, C, CT, R, WP)
    sid_t, sid_p, prev, last = chunk_ids(sid_ptr, i_n, i_c, T, C, rt, tp, SAMPLES)
    g_t, G_t, a_p, g_p, G_p, G_last = chunk_gates(a_ptr, g_ptr, i_n, i_h, T, H, rt, tt, vt, rp, tp, vp, WP, sid_t,
                                                  last, SAMPLES)
    bos_p = i_n * T * WP
    rows = i_c * R + rp
    offs_v = i_v * BV + tl.arange(0, BV)
    mv = offs_v < Dv
    qx = tl.zeros([CT, R], dtype=tl.float32)
    qs = tl.zeros([CT, BV], dtype=tl.float32)
    for i_k in range(0, tl.cdiv(Dk, BK)):
        offs_k = i_k * BK + tl.arange(0, BK)
        mk = offs_k < Dk
        qk = load_rows(q_ptr, i_n * T, i_h, tt, T, offs_k, H, Dk).to(tl.float32)
        x = load_rows(x_ptr, bos_p, i_h, rows, T * WP, offs_k, H, Dk).to(tl.float32)
        qx += mm(qk, tl.trans(x), PREC)
        if not BACKWARD:
            S = tl.load(h_ptr + (pid * H + i_h).to(tl.int64) * Dk * Dv + offs_k[:, None] * Dv + offs_v[None, :],
                        mask=mk[:, None] & mv[None, :], other=0.0)
            qs += mm(qk, S, PREC)
    M, Gr = read_mask(G_t, g_t, G_p, tt, vt, tp, vp, sid_t, sid_p, RBW)
    mq = M * qx
    if BACKWARD:
        do = load_rows(src_ptr, i_n * T, i_h, tt, T, offs_v, H, Dv).to(tl.float32)
        tl.store(out_ptr + ((bos_p + rows) * H + i_h)[:, None] * Dv + offs_v[None, :], mm(tl.trans(mq), do, PREC),
                 mask=vp[:, None] & mv[None, :])
    else:
        u = load_rows(src_ptr, bos_p, i_h, rows, T * WP, offs_v, H, Dv)
        o = tl.where(vt & (sid_t == prev), tl.exp(Gr), 0.0)[:, None] * qs + mm(mq, u, PREC)
        tl.store(out_ptr + ((i_n * T + tt) * H + i_h)[:, None] * Dv + offs_v[None, :],
                 o.to(out_ptr.dtype.element_ty), mask=vt[:, None] & mv[None, :])
