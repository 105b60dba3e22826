"""The last pass of the falcon-1/2 backward in Triton: the keys' gradient from the write features' one."""

from __future__ import annotations

import triton
import triton.language as tl

from falcon_lab.kernels.common.triton_helpers import chunk_of, chunk_samples, cut_pairs, load_pairs, seq_bounds


@triton.jit
def finish_dk_kernel(k_ptr, lk_ptr, dx_ptr, de_ptr, cu_ptr, cidx_ptr, sid_ptr, dk_ptr, dlk_ptr, T, NT,
                     H: tl.constexpr, Dk: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
                     SHIFTED: tl.constexpr, FRESH: tl.constexpr, IS_VARLEN: tl.constexpr, SAMPLES: tl.constexpr):
    """dk from dx (the write features' gradient without the energy path) and dE: dx_t + 2 dE_t x_t,
    stored at row t − 1 when shifted (the first token's goes to the state's last key; with ``SAMPLES``, the first
    token of a sample writes no pair, so the last key of the sample before it keeps its zero)."""
    pid, i_h = tl.program_id(0), tl.program_id(1)
    i_n, i_c = chunk_of(pid, cidx_ptr, NT, IS_VARLEN)
    bos, T_n = seq_bounds(i_n, cu_ptr, T, IS_VARLEN)
    t = i_c * BT + tl.arange(0, BT)
    valid = t < T_n
    writes = valid
    if SAMPLES:
        _, _, _, opens = chunk_samples(sid_ptr, i_n, i_c, t, T, BT)
        writes = valid & (opens == 0)
    de = tl.load(de_ptr + (bos + t) * H + i_h, mask=valid, other=0.0)
    for i_k in range(0, tl.cdiv(Dk, BK)):
        offs_k = i_k * BK + tl.arange(0, BK)
        mk = offs_k < Dk
        x = load_pairs(k_ptr, lk_ptr, bos, t, T_n, i_n, i_h, offs_k, H, Dk, SHIFTED, FRESH)
        if SAMPLES:
            x = cut_pairs(x, opens, SHIFTED)
        m = valid[:, None] & mk[None, :]
        dx = tl.load(dx_ptr + ((bos + t) * H + i_h)[:, None] * Dk + offs_k[None, :], mask=m, other=0.0)
        dx += 2.0 * de[:, None] * x
        if SHIFTED:
            dst = bos + t - 1
            mrow = writes & (t >= 1)
            tl.store(dk_ptr + (dst * H + i_h)[:, None] * Dk + offs_k[None, :],
                     dx.to(dk_ptr.dtype.element_ty), mask=mrow[:, None] & mk[None, :])
            if not FRESH:
                first = tl.sum(tl.where(((t == 0) & valid)[:, None], dx, 0.0), 0)
                if i_c == 0:
                    tl.store(dlk_ptr + (i_n * H + i_h) * Dk + offs_k, first, mask=mk)
        else:
            tl.store(dk_ptr + ((bos + t) * H + i_h)[:, None] * Dk + offs_k[None, :],
                     dx.to(dk_ptr.dtype.element_ty), mask=m)
