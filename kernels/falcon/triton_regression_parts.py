"""Triton pieces shared by the falcon-1 and falcon-2 kernels: pairs, gates, their gradients, the last dk pass.

Every kernel fuses the same per-token front end: the write feature x_t (``k_{t−1}`` shifted, ``k_t`` same
time; the first shifted pair reads the state's last key, or is no pair on a fresh sequence), the step size
η_t = β_t / (‖x_t‖² + λ_t + ε) (β itself when ``normalize=False``; λ_t = λ̄_t ‖x_t‖² with the scale-coupled
ridge), and the carry's log g_t = log(1 − min(η_t λ_t, 1 − ε_γ)) ≤ 0.

Token rows are flat: token t of sequence n is row ``bos_n + t`` of ``[rows, H, D]`` tensors, with
``bos_n = n T`` for a batch and ``cu_seqlens[n]`` for packed sequences.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


def new_buffer(*shape: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Every buffer the kernels fill is made here, so tests can poison them (NaN) to catch unwritten rows."""
    return torch.empty(*shape, dtype=dtype, device=device)


@triton.jit
def seq_bounds(i_n, cu_ptr, T, IS_VARLEN: tl.constexpr):
    """First row and length of sequence ``i_n``."""
    if IS_VARLEN:
        bos = tl.load(cu_ptr + i_n).to(tl.int32)
        eos = tl.load(cu_ptr + i_n + 1).to(tl.int32)
    else:
        bos = i_n * T
        eos = bos + T
    return bos, eos - bos


@triton.jit
def first_chunk(i_n, coff_ptr, T, C: tl.constexpr, IS_VARLEN: tl.constexpr):
    """Index of sequence ``i_n``'s first chunk among the whole batch's chunks of ``C`` rows."""
    if IS_VARLEN:
        base = tl.load(coff_ptr + i_n).to(tl.int32)
    else:
        base = i_n * tl.cdiv(T, C)
    return base


@triton.jit
def chunk_of(pid, cidx_ptr, NT, IS_VARLEN: tl.constexpr):
    """(sequence, chunk within it) of the ``pid``-th chunk of the whole batch."""
    if IS_VARLEN:
        i_n = tl.load(cidx_ptr + 2 * pid).to(tl.int32)
        i_c = tl.load(cidx_ptr + 2 * pid + 1).to(tl.int32)
    else:
        i_n = pid // NT
        i_c = pid % NT
    return i_n, i_c


@triton.jit
def load_pairs(k_ptr, lk_ptr, bos, t, valid, i_n, i_h, offs_k, H: tl.constexpr, Dk: tl.constexpr,
               SHIFTED: tl.constexpr, FRESH: tl.constexpr):
    """The write features x_t of local tokens ``t`` (``[BT]``) in columns ``offs_k``, as fp32 ``[BT, BK]``.

    Shifted: x_t = k_{t−1}; the first token of a sequence reads the state's last key, or 0 when fresh."""
    mk = offs_k < Dk
    if SHIFTED:
        src = bos + t - 1
        m = (valid & (t >= 1))[:, None] & mk[None, :]
        x = tl.load(k_ptr + (src * H + i_h)[:, None] * Dk + offs_k[None, :], mask=m, other=0.0).to(tl.float32)
        if not FRESH:
            lk = tl.load(lk_ptr + (i_n * H + i_h) * Dk + offs_k, mask=mk, other=0.0).to(tl.float32)
            x = tl.where(((t == 0) & valid)[:, None], lk[None, :], x)
    else:
        m = valid[:, None] & mk[None, :]
        x = tl.load(k_ptr + ((bos + t) * H + i_h)[:, None] * Dk + offs_k[None, :], mask=m,
                    other=0.0).to(tl.float32)
    return x


@triton.jit
def is_pair(t, valid, SHIFTED: tl.constexpr, FRESH: tl.constexpr):
    """Real pairs: every valid token but the first one of a fresh shifted sequence."""
    if SHIFTED and FRESH:
        return valid & (t > 0)
    else:
        return valid


@triton.jit
def gates(beta, lam, energy, pair, eps, floor, NORMALIZE: tl.constexpr, COUPLED: tl.constexpr):
    """η and g = log γ for tiles of gains ``beta``, ridges ``lam`` and energies ‖x‖² (broadcastable)."""
    if COUPLED:
        lam = lam * energy
    if NORMALIZE:
        denom = energy + lam + eps
        pos = denom > 0
        eta = tl.where(pos, beta / tl.where(pos, denom, 1.0), 0.0)
    else:
        eta = beta
    eta = tl.where(pair, eta, 0.0)
    alpha = tl.minimum(eta * lam, 1.0 - floor)
    return eta, tl.log(1.0 - alpha)


@triton.jit
def gates_grad(beta, lam, energy, pair, deta, dg, eps, floor, NORMALIZE: tl.constexpr, COUPLED: tl.constexpr):
    """The gradients of ``gates`` w.r.t. beta, lam (λ̄ when coupled) and the energy, given dη and dg."""
    lam_eff = lam
    if COUPLED:
        lam_eff = lam * energy
    if NORMALIZE:
        denom = energy + lam_eff + eps
        pos = denom > 0
        inv = 1.0 / tl.where(pos, denom, 1.0)
        eta = tl.where(pair & pos, beta * inv, 0.0)
    else:
        eta = tl.where(pair, beta, 0.0)
    alpha_raw = eta * lam_eff
    alpha = tl.minimum(alpha_raw, 1.0 - floor)
    # the clamp passes no gradient where it bites (torch.clamp passes it at equality, as here)
    dalpha = tl.where(alpha_raw <= 1.0 - floor, -dg / (1.0 - alpha), 0.0)
    deta_all = deta + dalpha * lam_eff
    dlam = dalpha * eta
    if NORMALIZE:
        live = pair & pos
        dbeta = tl.where(live, deta_all * inv, 0.0)
        ddenom = tl.where(live, -deta_all * eta * inv, 0.0)
        dlam += ddenom
        denergy = ddenom
    else:
        dbeta = tl.where(pair, deta_all, 0.0)
        denergy = tl.zeros_like(dbeta)
    if COUPLED:
        denergy += dlam * lam
        dlam = dlam * energy
    return dbeta, dlam, denergy


@triton.jit
def rev_cumsum(x):
    """Σ_{r ≥ t} x_r along axis 0 (inclusive), for ``[BT]`` or ``[BT, BV]`` tiles."""
    return tl.sum(x, 0, keep_dims=True) - tl.cumsum(x, 0) + x


@triton.jit
def mm(a, b, PREC: tl.constexpr):
    """A matmul with fp32 accumulation: operands rounded to bf16 (``PREC="bf16"``) or fp32 operands at the
    input precision ``ieee``, ``tf32x3`` or ``tf32``."""
    if PREC == "bf16":
        return tl.dot(a.to(tl.bfloat16), b.to(tl.bfloat16))
    else:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision=PREC)


@triton.jit
def finish_dk_kernel(k_ptr, lk_ptr, dx_ptr, de_ptr, cu_ptr, cidx_ptr, dk_ptr, dlk_ptr, T, NT,
                     H: tl.constexpr, Dk: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
                     SHIFTED: tl.constexpr, FRESH: tl.constexpr, IS_VARLEN: tl.constexpr):
    """dk from dx (the write features' gradient without the energy path) and dE: dx_t + 2 dE_t x_t,
    stored at row t − 1 when shifted (the first token's goes to the state's last key)."""
    pid, i_h = tl.program_id(0), tl.program_id(1)
    i_n, i_c = chunk_of(pid, cidx_ptr, NT, IS_VARLEN)
    bos, T_n = seq_bounds(i_n, cu_ptr, T, IS_VARLEN)
    t = i_c * BT + tl.arange(0, BT)
    valid = t < T_n
    de = tl.load(de_ptr + (bos + t) * H + i_h, mask=valid, other=0.0)
    for i_k in range(0, tl.cdiv(Dk, BK)):
        offs_k = i_k * BK + tl.arange(0, BK)
        mk = offs_k < Dk
        x = load_pairs(k_ptr, lk_ptr, bos, t, valid, i_n, i_h, offs_k, H, Dk, SHIFTED, FRESH)
        m = valid[:, None] & mk[None, :]
        dx = tl.load(dx_ptr + ((bos + t) * H + i_h)[:, None] * Dk + offs_k[None, :], mask=m, other=0.0)
        dx += 2.0 * de[:, None] * x
        if SHIFTED:
            dst = bos + t - 1
            mrow = valid & (t >= 1)
            tl.store(dk_ptr + (dst * H + i_h)[:, None] * Dk + offs_k[None, :],
                     dx.to(dk_ptr.dtype.element_ty), mask=mrow[:, None] & mk[None, :])
            if not FRESH:
                first = tl.sum(tl.where(((t == 0) & valid)[:, None], dx, 0.0), 0)
                if i_c == 0:
                    tl.store(dlk_ptr + (i_n * H + i_h) * Dk + offs_k, first, mask=mk)
        else:
            tl.store(dk_ptr + ((bos + t) * H + i_h)[:, None] * Dk + offs_k[None, :],
                     dx.to(dk_ptr.dtype.element_ty), mask=m)
