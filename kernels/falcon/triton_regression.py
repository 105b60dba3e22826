"""``backend="triton"`` for the regression rules falcon-1 and falcon-2: an autograd op over the chunk kernels.

The kernels take q, k, v, β, λ in their own dtype (bf16, fp16 or fp32) and fuse the pairing, η, γ and
the chunk-local decay prefixes; states and the solve stay fp32. falcon-1 runs the UT transform per chunk of
``chunk_size`` tokens (``triton_regression_f1*.py``); falcon-2 runs one batched per-channel solve sharing
the chunk Gram per block of 16 tokens (``triton_regression_f2*.py``). The backward recomputes the
forward's chunk quantities instead of saving them.
"""

from __future__ import annotations

import torch
import triton
from torch import Tensor

from kernels.falcon.config import RuleConfig
from kernels.falcon.state import FastWeightState
from kernels.falcon.triton_common import chunk_table, interpreting, next_power_of_2
from kernels.falcon.triton_regression_f1 import f1_intra_kernel, f1_prep_kernel, f1_state_kernel
from kernels.falcon.triton_regression_f1_bwd import f1_dstate_kernel, f1_grad_kernel
from kernels.falcon.triton_regression_f2 import f2_dstate_kernel, f2_fwd_kernel
from kernels.falcon.triton_regression_f2_bwd import f2_grad_kernel
from kernels.falcon import triton_regression_parts as parts
from kernels.falcon.triton_regression_parts import finish_dk_kernel

DTYPES = (torch.bfloat16, torch.float16, torch.float32)
CHUNK_SIZES = (16, 32, 64)


class Layout:
    """Where the sequences and their chunks lie: a batch of B sequences of T tokens, or packed ones."""

    def __init__(self, q: Tensor, cu_seqlens: Tensor | None, C: int):
        B, T, H, Dk = q.shape
        self.T, self.H, self.C = T, H, C
        self.varlen = cu_seqlens is not None
        if cu_seqlens is None:
            self.N, self.NT = B, triton.cdiv(T, C)
            self.n_chunks = B * self.NT
            self.cu = self.cidx = self.coff = q  # never read: the kernels compute the offsets
        else:
            self.cidx, self.coff = chunk_table(cu_seqlens, C)
            self.N, self.NT = cu_seqlens.numel() - 1, 0
            self.n_chunks = self.cidx.shape[0]
            self.cu = cu_seqlens.to(torch.int32).contiguous()


# The matmul operands inside the kernels, by input dtype, on a GPU: "tf32x3" (three tf32 passes, about fp32),
# "tf32" (one pass) or "bf16" (operands rounded to bf16). The interpreter always multiplies in exact fp32.
MATMUL_PRECISION = {torch.float32: "tf32x3", torch.bfloat16: "tf32x3", torch.float16: "tf32x3"}


def _prec(dtype: torch.dtype) -> str:
    return "ieee" if interpreting() else MATMUL_PRECISION[dtype]


def _blocks(Dk: int, Dv: int) -> tuple[int, int, int, int]:
    """(BK, BV) for the chunk-parallel kernels and (BK, BV) for the sequential state passes."""
    BK = min(64, next_power_of_2(Dk))
    BV = min(64, next_power_of_2(Dv))
    BKs = next_power_of_2(Dk)
    BVs = min(next_power_of_2(Dv), 64 if BKs <= 64 else 32 if BKs <= 128 else 16)
    return BK, BV, BKs, BVs


def _f1_chunks(k, v, beta, lam, lk, cfg, fresh, lay, prec):
    """The UT transform of every chunk: A, W, Ũ and the per-token η, G, g (fp32)."""
    rows, H, Dk, Dv, C = k.shape[0] * k.shape[1], lay.H, k.shape[-1], v.shape[-1], lay.C
    BK, BV, _, _ = _blocks(Dk, Dv)
    f32 = dict(dtype=torch.float32, device=k.device)
    A = parts.new_buffer(rows, H, C, **f32)
    W = parts.new_buffer(rows, H, Dk, **f32)
    Ut = parts.new_buffer(rows, H, Dv, **f32)
    eta, G, g = (parts.new_buffer(rows, H, **f32) for _ in range(3))
    f1_prep_kernel[(lay.n_chunks, H)](
        k, v, beta, lam, lk, lay.cu, lay.cidx, A, W, Ut, eta, G, g, lay.T, lay.NT, cfg.eps, cfg.decay_floor,
        H=H, Dk=Dk, Dv=Dv, C=C, BK=BK, BV=BV, SHIFTED=cfg.shifted, FRESH=fresh, NORMALIZE=cfg.normalize,
        COUPLED=cfg.scale_coupled_ridge, IS_VARLEN=lay.varlen, PREC=prec, num_warps=4)
    return A, W, Ut, eta, G, g


def _f1_states(k, lk, W, Ut, G, S0, cfg, fresh, lay, prec, store_h):
    """The state pass: U, the final state and (when asked) every chunk's entry state."""
    rows, H, Dk, Dv, C = k.shape[0] * k.shape[1], lay.H, k.shape[-1], Ut.shape[-1], lay.C
    _, _, BKs, BVs = _blocks(Dk, Dv)
    f32 = dict(dtype=torch.float32, device=k.device)
    U = parts.new_buffer(rows, H, Dv, **f32)
    Sf = parts.new_buffer(lay.N, H, Dk, Dv, **f32)
    h = parts.new_buffer(lay.n_chunks, H, Dk, Dv, **f32) if store_h else Sf
    f1_state_kernel[(triton.cdiv(Dv, BVs), lay.N * H)](
        k, lk, W, Ut, G, S0, lay.cu, lay.coff, h, U, Sf, lay.T, H=H, Dk=Dk, Dv=Dv, C=C, BK=BKs, BV=BVs,
        SHIFTED=cfg.shifted, FRESH=fresh, IS_VARLEN=lay.varlen, STORE_H=store_h, PREC=prec,
        num_warps=4 if BKs <= 64 else 8)
    return U, Sf, h


def _f1_intra(q, k, lk, h, src, G, g, out, cfg, fresh, lay, prec, backward):
    H, Dk, Dv = lay.H, k.shape[-1], src.shape[-1]
    BK, BV, _, _ = _blocks(Dk, Dv)
    f1_intra_kernel[(triton.cdiv(Dv, BV), lay.n_chunks, H)](
        q, k, lk, h, src, G, g, lay.cu, lay.cidx, out, lay.T, lay.NT, H=H, Dk=Dk, Dv=Dv, C=lay.C, BK=BK,
        BV=BV, SHIFTED=cfg.shifted, FRESH=fresh, RBW=cfg.timing == "rbw", BACKWARD=backward,
        IS_VARLEN=lay.varlen, PREC=prec, num_warps=4)


def f1_forward(q, k, v, beta, lam, S0, lk, cfg, fresh, lay):
    prec = _prec(q.dtype)
    A, W, Ut, eta, G, g = _f1_chunks(k, v, beta, lam, lk, cfg, fresh, lay, prec)
    U, Sf, h = _f1_states(k, lk, W, Ut, G, S0, cfg, fresh, lay, prec, store_h=True)
    o = parts.new_buffer(*v.shape, dtype=q.dtype, device=q.device)
    _f1_intra(q, k, lk, h, U, G, g, o, cfg, fresh, lay, prec, backward=False)
    return o, Sf


def f1_backward(q, k, v, beta, lam, S0, lk, do, dSf, cfg, fresh, lay):
    prec = _prec(q.dtype)
    H, Dk, Dv, C = lay.H, k.shape[-1], v.shape[-1], lay.C
    rows = k.shape[0] * k.shape[1]
    A, W, Ut, eta, G, g = _f1_chunks(k, v, beta, lam, lk, cfg, fresh, lay, prec)
    U, _, h = _f1_states(k, lk, W, Ut, G, S0, cfg, fresh, lay, prec, store_h=True)
    del W, Ut
    f32 = dict(dtype=torch.float32, device=k.device)
    dul = parts.new_buffer(rows, H, Dv, **f32)
    _f1_intra(q, k, lk, h, do, G, g, dul, cfg, fresh, lay, prec, backward=True)
    BK, BV, BKs, BVs = _blocks(Dk, Dv)
    dh = parts.new_buffer(*h.shape, **f32)
    dB = parts.new_buffer(rows, H, Dv, **f32)
    dS0 = parts.new_buffer(*S0.shape, **f32)
    f1_dstate_kernel[(triton.cdiv(Dv, BVs), lay.N * H)](
        q, k, lk, do, dul, A, eta, G, g, dSf if dSf is not None else dS0, lay.cu, lay.coff, dh, dB, dS0, lay.T,
        H=H, Dk=Dk, Dv=Dv, C=C, BK=BKs, BV=BVs, SHIFTED=cfg.shifted, FRESH=fresh, RBW=cfg.timing == "rbw",
        HAS_DSF=dSf is not None, IS_VARLEN=lay.varlen, PREC=prec, num_warps=4 if BKs <= 64 else 8)
    del dul, A
    dq = parts.new_buffer(*q.shape, dtype=q.dtype, device=q.device)
    dx = parts.new_buffer(rows, H, Dk, **f32)
    dv = parts.new_buffer(*v.shape, dtype=v.dtype, device=v.device)
    dbeta = parts.new_buffer(*beta.shape, dtype=beta.dtype, device=beta.device)
    dlam = parts.new_buffer(*lam.shape, dtype=lam.dtype, device=lam.device)
    de = parts.new_buffer(rows, H, **f32)
    f1_grad_kernel[(lay.n_chunks, H)](
        q, k, v, beta, lam, lk, do, U, dB, h, dh, lay.cu, lay.cidx, dq, dx, dv, dbeta, dlam, de, lay.T, lay.NT,
        cfg.eps, cfg.decay_floor, H=H, Dk=Dk, Dv=Dv, C=C, BK=BK, BV=BV, SHIFTED=cfg.shifted, FRESH=fresh,
        RBW=cfg.timing == "rbw", NORMALIZE=cfg.normalize, COUPLED=cfg.scale_coupled_ridge,
        IS_VARLEN=lay.varlen, PREC=prec, num_warps=8 if C == 64 else 4)
    dk, dlk = finish_dk(k, lk, dx, de, cfg, fresh, lay)
    return dq, dk, dv, dbeta, dlam, dS0, dlk


def finish_dk(k: Tensor, lk: Tensor, dx: Tensor, de: Tensor, cfg: RuleConfig, fresh: bool,
              lay: Layout) -> tuple[Tensor, Tensor]:
    """dk (and the state's last key's gradient) from dx and dE, on the layout's chunks."""
    H, Dk = lay.H, k.shape[-1]
    dk = torch.zeros_like(k)  # shifted: the last key of a sequence writes no pair in it
    dlk = torch.zeros_like(lk)
    finish_dk_kernel[(lay.n_chunks, H)](
        k, lk, dx, de, lay.cu, lay.cidx, dk, dlk, lay.T, lay.NT, H=H, Dk=Dk, BT=lay.C,
        BK=min(64, next_power_of_2(Dk)), SHIFTED=cfg.shifted, FRESH=fresh, IS_VARLEN=lay.varlen, num_warps=4)
    return dk, dlk


def _f2_blocks(Dk: int, Dv: int) -> tuple[int, int]:
    BK = next_power_of_2(Dk)
    return BK, min(next_power_of_2(Dv), 32 if BK <= 128 else 16)


def _f2_states(q, k, v, beta, lam, S0, lk, cfg, fresh, lay, prec, write_o):
    """The sequential falcon-2 pass: outputs (when asked), or U and every chunk's entry state."""
    rows, H, Dk, Dv = k.shape[0] * k.shape[1], lay.H, k.shape[-1], v.shape[-1]
    BK, BV = _f2_blocks(Dk, Dv)
    f32 = dict(dtype=torch.float32, device=k.device)
    Sf = parts.new_buffer(lay.N, H, Dk, Dv, **f32)
    o = parts.new_buffer(*v.shape, dtype=q.dtype, device=q.device) if write_o else Sf
    U = Sf if write_o else parts.new_buffer(rows, H, Dv, **f32)
    h = Sf if write_o else parts.new_buffer(lay.n_chunks, H, Dk, Dv, **f32)
    f2_fwd_kernel[(triton.cdiv(Dv, BV), lay.N * H)](
        q, k, v, beta, lam, lk, S0, lay.cu, lay.coff, o, U, h, Sf, lay.T, cfg.eps, cfg.decay_floor, H=H, Dk=Dk,
        Dv=Dv, C=lay.C, BK=BK, BV=BV, SHIFTED=cfg.shifted, FRESH=fresh, NORMALIZE=cfg.normalize,
        COUPLED=cfg.scale_coupled_ridge, RBW=cfg.timing == "rbw", WRITE_O=write_o, STORE=not write_o,
        IS_VARLEN=lay.varlen, PREC=prec, num_warps=4)
    return o, Sf, U, h


def f2_forward(q, k, v, beta, lam, S0, lk, cfg, fresh, lay):
    o, Sf, _, _ = _f2_states(q, k, v, beta, lam, S0, lk, cfg, fresh, lay, _prec(q.dtype), write_o=True)
    return o, Sf


def f2_backward(q, k, v, beta, lam, S0, lk, do, dSf, cfg, fresh, lay):
    prec = _prec(q.dtype)
    rows, H, Dk, Dv = k.shape[0] * k.shape[1], lay.H, k.shape[-1], v.shape[-1]
    BK, BV = _f2_blocks(Dk, Dv)
    f32 = dict(dtype=torch.float32, device=k.device)
    _, _, U, h = _f2_states(q, k, v, beta, lam, S0, lk, cfg, fresh, lay, prec, write_o=False)
    dh = parts.new_buffer(*h.shape, **f32)
    dB = parts.new_buffer(rows, H, Dv, **f32)
    dS0 = parts.new_buffer(*S0.shape, **f32)
    flags = dict(H=H, Dk=Dk, Dv=Dv, C=lay.C, BK=BK, SHIFTED=cfg.shifted, FRESH=fresh,
                 NORMALIZE=cfg.normalize, COUPLED=cfg.scale_coupled_ridge, RBW=cfg.timing == "rbw",
                 IS_VARLEN=lay.varlen, PREC=prec, num_warps=4)
    f2_dstate_kernel[(triton.cdiv(Dv, BV), lay.N * H)](
        q, k, v, beta, lam, lk, do, U, dSf if dSf is not None else dS0, lay.cu, lay.coff, dh, dB, dS0, lay.T,
        cfg.eps, cfg.decay_floor, BV=BV, HAS_DSF=dSf is not None, **flags)
    dq = parts.new_buffer(*q.shape, dtype=q.dtype, device=q.device)
    dx = parts.new_buffer(rows, H, Dk, **f32)
    dv = parts.new_buffer(*v.shape, dtype=v.dtype, device=v.device)
    dbeta = parts.new_buffer(*beta.shape, dtype=beta.dtype, device=beta.device)
    dlam = parts.new_buffer(*lam.shape, dtype=lam.dtype, device=lam.device)
    de = parts.new_buffer(rows, H, **f32)
    f2_grad_kernel[(lay.n_chunks, H)](
        q, k, v, beta, lam, lk, do, U, dB, h, dh, lay.cu, lay.cidx, dq, dx, dv, dbeta, dlam, de, lay.T, lay.NT,
        cfg.eps, cfg.decay_floor, BV=16, **flags)  # several [16, 16, BV] tiles live at once
    dk, dlk = finish_dk(k, lk, dx, de, cfg, fresh, lay)
    return dq, dk, dv, dbeta, dlam, dS0, dlk


class RegressionRule(torch.autograd.Function):
    """(q, k, v, β, λ, S0, last key) -> (o, final S), with the chunked backward in Triton."""

    @staticmethod
    def forward(ctx, q, k, v, beta, lam, S0, lk, cfg, fresh, C, cu_seqlens):
        lay = Layout(q, cu_seqlens, C if not cfg.per_channel else 16)
        run = f2_forward if cfg.per_channel else f1_forward
        o, Sf = run(q, k, v, beta, lam, S0, lk, cfg, fresh, lay)
        ctx.save_for_backward(q, k, v, beta, lam, S0, lk)
        ctx.cfg, ctx.fresh, ctx.lay = cfg, fresh, lay
        return o, Sf

    @staticmethod
    def backward(ctx, do, dSf):
        q, k, v, beta, lam, S0, lk = ctx.saved_tensors
        run = f2_backward if ctx.cfg.per_channel else f1_backward
        grads = run(q, k, v, beta, lam, S0, lk, do.contiguous(), None if dSf is None else dSf.contiguous(),
                    ctx.cfg, ctx.fresh, ctx.lay)
        return (*grads, None, None, None, None)


def _check(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, chunk_size: int) -> None:
    if q.dtype not in DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"backend='triton' takes q, k, v of one dtype among bf16, fp16 and fp32; got "
                         f"{q.dtype}, {k.dtype}, {v.dtype} (use backend='recurrent' or 'chunk' for float64)")
    for name, t in (("beta", beta), ("lam", lam)):
        if t.dtype not in DTYPES:
            raise ValueError(f"backend='triton' takes {name} in bf16, fp16 or fp32; got {t.dtype}")
    if chunk_size not in CHUNK_SIZES:
        raise ValueError(f"backend='triton' takes chunk_size in {CHUNK_SIZES}; got {chunk_size}")
    if max(q.shape[-1], v.shape[-1]) > 256:
        raise ValueError(f"backend='triton' takes Dk, Dv up to 256; got Dk={q.shape[-1]}, Dv={v.shape[-1]}")
    if not q.is_cuda and not interpreting():
        raise ValueError("backend='triton' needs CUDA tensors (or TRITON_INTERPRET=1 on the CPU)")


def triton_regression(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, cfg: RuleConfig,
                      state: FastWeightState, fresh: bool, chunk_size: int = 64,
                      cu_seqlens: Tensor | None = None) -> tuple[Tensor, FastWeightState]:
    """falcon-1/2 over whole sequences (or packed ones, ``cu_seqlens``); o in q's dtype, the state in fp32."""
    _check(q, k, v, beta, lam, chunk_size)
    q, k, v, beta, lam = (t.contiguous() for t in (q, k, v, beta, lam))
    S0 = state.S.float().contiguous()
    lk = state.last_key.float().contiguous()
    o, S = RegressionRule.apply(q, k, v, beta, lam, S0, lk, cfg, fresh, chunk_size, cu_seqlens)
    last = k[:, -1] if cu_seqlens is None else k[0, cu_seqlens[1:].long() - 1]
    final = FastWeightState(S=S, last_key=last.float(), x_tail=state.x_tail, v_tail=state.v_tail,
                            tail_mask=state.tail_mask)
    return o, final
