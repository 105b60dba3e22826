"""``backend="triton"`` for the inner-product rules falcon-1a and falcon-2a: chunked decayed linear attention.

    S_t = γ_t S_{t−1} + η_t x_t y_tᵀ  (falcon-1a; for falcon-2a η_{t,j}, γ_{t,j} act on value column j)

The kernels take q, k, v, beta, lam in their own dtype and fuse the pairing (x_t = k_{t−1} shifted, the
state's last key at a sequence start), η = β / (‖x‖² + λ + ε), the clamp α = min(ηλ, 1 − ε_γ), γ = 1 − α and
the chunk-local cumulative log-carries G. With G_t the sum of log γ over the chunk up to t and r(t) the
state a read sees (t for RAW, t − 1 for RBW):

    o_t = e^{G_r(t)} ⊙ (h_cᵀ q_t) + Σ_{s ≤ r(t), s in chunk} (q_t·x_s) e^{G_r(t) − G_s} ⊙ η_s ⊙ y_s

with h_c the state before chunk c. For falcon-2a the carry differs per value column, so the intra-chunk
sum is split into 16-token blocks: earlier blocks factor through the token before the block (both factors
≤ 1) and the diagonal block through its midpoint (factors ≤ e^{8|log ε_γ|}, hence ``decay_floor`` ≥ 1e-3).

Backward (same chunking): dh runs backwards over chunks, then per chunk dv' = D_tᵀ x_t (v' = η ⊙ v),
dq = S_r(t) do_t, dx = D_t v'_t, and the carries' gradient from the chunk-local identity
dG_τ = o_τ' ⊙ do_τ' − v'_τ ⊙ dv'_τ (+ dh_end ⊙ S_end summed over keys at the chunk's last token), whose
reverse cumulative sum within the chunk is d log γ.

Rows of samples (``decayed_attention(..., sample_id=)``): the same kernels over the rows as they are, in full
chunks, each token's sample id masking what it sees (its own sample's writes; the carried state only if it is of
the sample the state holds; the state after a chunk only the sample of its last token) and G summed within each
chunk and sample (``triton_parts``): every sample is exact as if run alone, with the shapes of the batch alone and no
table read on the host.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
import triton
from torch import Tensor

from falcon_lab.kernels.common import grid, packed
from falcon_lab.kernels.common import triton_helpers as helpers
from falcon_lab.kernels.common.checks import check_sample_ids
from falcon_lab.kernels.common.config import RuleConfig
from falcon_lab.kernels.common.state import FastWeightState
from falcon_lab.kernels.common.triton_helpers import chunk_table, next_power_of_2
from falcon_lab.kernels.inner_product.triton_bwd import (_bwd_c_kernel, _bwd_dh_kernel, _bwd_dqdx_kernel, _bwd_dv_kernel,
                                              _bwd_final_kernel, _bwd_gates_kernel)
from falcon_lab.kernels.inner_product.triton_fwd import (_fwd_h_kernel, _fwd_o_kernel, _prep_kernel,
                                                         _sample_prefix_kernel)
from falcon_lab.kernels.inner_product.triton_parts import SUB

# the kernels' matmul operands, by input dtype: fp32 at full precision, half types as they come (fp32 accumulation)
PRECISION = {torch.float32: "ieee", torch.bfloat16: "bf16", torch.float16: "fp16"}


class _Plan(NamedTuple):
    """Everything but the tensors: the rule's flags, block sizes and packed-sequence tables."""

    per_channel: bool
    shifted: bool
    fresh: bool
    raw: bool
    normalize: bool
    scale_ridge: bool
    eps: float
    floor: float
    BT: int
    BR: int
    BK: int
    BV: int
    T: int
    NT: int  # chunks per sequence (without cu_seqlens)
    NTT: int  # chunks of all sequences
    N: int  # sequences
    cu_seqlens: Tensor | None
    chunk_indices: Tensor | None
    chunk_offsets: Tensor | None
    prec: str
    sample_id: Tensor | None = None  # [B, T] int32: rows of samples kept apart (decayed_attention's sample_id)
    delay: int = 0  # token t writes the pair of token t − delay (decayed_attention's delay)


def _tables(q: Tensor, cu_seqlens: Tensor | None, chunk_size: int) -> tuple:
    """(cu_seqlens as int32, chunk_indices, chunk_offsets, N sequences, NT chunks a sequence, NTT chunks in all):
    the rows of the batch, or the packed sequences of its one row."""
    B, T = q.shape[:2]
    if cu_seqlens is None:
        NT = triton.cdiv(T, chunk_size)
        return None, None, None, B, NT, B * NT
    cu_seqlens = packed.as_int32(cu_seqlens, q.device)
    chunk_indices, chunk_offsets = chunk_table(cu_seqlens, chunk_size)
    return cu_seqlens, chunk_indices, chunk_offsets, cu_seqlens.numel() - 1, 0, chunk_indices.shape[0]


def _flags(p: _Plan) -> dict:
    return dict(SHIFTED=p.shifted, FRESH=p.fresh, PER_CHANNEL=p.per_channel, IS_VARLEN=p.cu_seqlens is not None)


def _samples(p: _Plan) -> dict:
    """The sample ids of rows of samples (``sid``) and whether there are any, for the kernels that take them."""
    return dict(sid=p.sample_id, SAMPLES=p.sample_id is not None)


def _forward(p: _Plan, q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, S0: Tensor,
             last_key: Tensor, gates: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor,
                                                                                  Tensor]:
    """With ``gates`` = (η, G) given (``decayed_attention``), beta and lam are not read and the prep is skipped."""
    B, T, H, K = k.shape
    V = v.shape[-1]
    dev = k.device
    gshape = (B, T, H, V) if p.per_channel else (B, T, H)
    h = helpers.new_buffer(p.NTT + p.N, H, K, V, dtype=k.dtype, device=dev)
    ST = helpers.new_buffer(p.N, H, K, V, dtype=torch.float32, device=dev)
    o = helpers.new_buffer(*v.shape, dtype=q.dtype, device=dev)
    tables = (p.cu_seqlens, p.chunk_indices, p.chunk_offsets)
    rows = p.NT if p.cu_seqlens is None else p.NTT
    if gates is None:
        eta = helpers.new_buffer(*gshape, dtype=torch.float32, device=dev)
        G = helpers.new_buffer(*gshape, dtype=torch.float32, device=dev)
        _prep_kernel[(rows, B * H)](k, last_key, beta, lam, eta, G, *tables, eps=p.eps, floor=p.floor, T=T,
                                    NT=p.NT, H=H, K=K, V=V, BT=p.BT, BK=p.BK, BV=p.BV, NORMALIZE=p.normalize,
                                    SCALE_RIDGE=p.scale_ridge, **_flags(p), **_samples(p))
    else:
        eta, G = gates
    NK, NV = triton.cdiv(K, p.BK), triton.cdiv(V, p.BV)
    _fwd_h_kernel[(NK, NV, p.N * H)](k, v, last_key, eta, G, S0, h, ST, p.cu_seqlens, p.chunk_offsets,
                                     T=T, NT=p.NT, H=H, K=K, V=V, BT=p.BT, BK=p.BK, BV=p.BV, PREC=p.prec,
                                     DELAY=p.delay, **_flags(p), **_samples(p))
    _fwd_o_kernel[(NV, rows * (p.BT // p.BR), B * H)](q, k, v, last_key, eta, G, h, o, *tables, T=T, NT=p.NT, H=H,
                                                       K=K, V=V, BT=p.BT, BR=p.BR, BK=p.BK, BV=p.BV, RAW=p.raw,
                                                       PREC=p.prec, DELAY=p.delay, **_flags(p), **_samples(p))
    return o, ST, eta, G, h


def _backward(p: _Plan, q: Tensor, k: Tensor, v: Tensor, beta: Tensor | None, lam: Tensor | None, last_key: Tensor,
              eta: Tensor, G: Tensor, h: Tensor, do: Tensor, dST: Tensor | None,
              into: tuple[Tensor, Tensor, Tensor] | None = None) -> tuple[Tensor, ...]:
    """``into`` (the gates given, ``decayed_attention``'s): dq, dk, dv already holding another op's gradients of the
    same q, k, v (in their dtypes, contiguous); the kernels add theirs into them, in float32 with one rounding."""
    B, T, H, K = k.shape
    V = v.shape[-1]
    dev = k.device
    NK, NV = triton.cdiv(K, p.BK), triton.cdiv(V, p.BV)
    tables = (p.cu_seqlens, p.chunk_indices, p.chunk_offsets)
    rows = p.NT if p.cu_seqlens is None else p.NTT
    dhe = helpers.new_buffer(p.NTT, H, K, V, dtype=q.dtype, device=dev)
    dS0 = helpers.new_buffer(p.N, H, K, V, dtype=torch.float32, device=dev)
    end = helpers.new_buffer(NK, p.NTT, H, V, dtype=torch.float32, device=dev)
    _bwd_dh_kernel[(NK, NV, p.N * H)](q, do, G, h, dST, dhe, dS0, end, p.cu_seqlens, p.chunk_offsets, T=T,
                                      NT=p.NT, NTT=p.NTT, H=H, K=K, V=V, BT=p.BT, BK=p.BK, BV=p.BV, RAW=p.raw,
                                      PER_CHANNEL=p.per_channel, IS_VARLEN=p.cu_seqlens is not None,
                                      HAS_DST=dST is not None, PREC=p.prec, **_samples(p))
    pshape = (B, T, H, V) if p.per_channel else (B, T, NV, H)

    def buffer(*shape: int, dtype: torch.dtype) -> Tensor:  # dv's and dx's: with delayed pairs, their tails zero
        return _zero_tails(helpers.new_buffer(*shape, dtype=dtype, device=dev), p)

    acc = into is not None
    if acc and beta is not None:
        raise ValueError("_backward adds into given gradients only with the gates given (decayed_attention)")
    dv = into[2] if acc else buffer(*v.shape, dtype=v.dtype)
    P = helpers.new_buffer(*pshape, dtype=torch.float32, device=dev)
    deta = helpers.new_buffer(*pshape, dtype=torch.float32, device=dev)
    _bwd_dv_kernel[(NV, rows * (p.BT // p.BR), B * H)](q, k, v, last_key, eta, G, h, dhe, do, dv, P, deta, *tables,
                                                        T=T, NT=p.NT, H=H, K=K, V=V, BT=p.BT, BR=p.BR, BK=p.BK,
                                                        BV=p.BV, NV=NV, RAW=p.raw, PREC=p.prec, DELAY=p.delay,
                                                        ACC=acc, **_flags(p), **_samples(p))
    C = None
    if p.per_channel:
        C = helpers.new_buffer(B, T, H, p.BT, dtype=torch.float32, device=dev)
        _bwd_c_kernel[(rows * (p.BT // p.BR), B * H)](v, eta, G, do, C, *tables, T, p.NT, H=H, V=V, BT=p.BT,
                                                       BR=p.BR, BV=p.BV, RAW=p.raw,
                                                       IS_VARLEN=p.cu_seqlens is not None, PREC=p.prec)
    dq = into[0] if acc else helpers.new_buffer(*q.shape, dtype=q.dtype, device=dev)
    # with the gates given (decayed_attention) dx is k's gradient itself: written once in k's dtype
    dxd = into[1] if acc else buffer(*k.shape, dtype=k.dtype if beta is None else torch.float32)
    # falcon-2a's per-channel tiles in fp32 overflow Hopper's 227 KiB of shared memory at D = 128 when the
    # value loop is pipelined three deep (262,656 bytes asked on the H200): these two go unpipelined.
    lean = dict(num_stages=1) if p.per_channel and q.element_size() == 4 else {}
    _bwd_dqdx_kernel[(NK, rows, B * H)](q, k, v, last_key, eta, G, h, dhe, do, C, dq, dxd, *tables, T=T, NT=p.NT,
                                        H=H, K=K, V=V, BT=p.BT, BK=p.BK, BV=p.BV, RAW=p.raw, PREC=p.prec,
                                        DELAY=p.delay, ACC=acc, **_flags(p), **_samples(p), **lean)
    if beta is None:  # gates given as they are (decayed_attention): dη and d log γ; x = k, no energy term
        deta_out = helpers.new_buffer(B, T, H, dtype=torch.float32, device=dev)
        dlogg = helpers.new_buffer(B, T, H, dtype=torch.float32, device=dev)
        _bwd_gates_kernel[(rows, B * H)](eta, P, deta, end, deta_out, dlogg, *tables, T=T, NT=p.NT, NTT=p.NTT,
                                         H=H, V=V, BT=p.BT, BV=p.BV, NK=NK, NV=NV, RAW=p.raw,
                                         IS_VARLEN=p.cu_seqlens is not None, **_samples(p))
        return dq, dxd, dv, deta_out, dlogg, dS0
    dk = helpers.new_buffer(*k.shape, dtype=k.dtype, device=dev)
    dbeta = helpers.new_buffer(*beta.shape, dtype=beta.dtype, device=dev)
    dlam = helpers.new_buffer(*lam.shape, dtype=lam.dtype, device=dev)
    _bwd_final_kernel[(rows, B * H)](k, last_key, beta, lam, eta, G, P, deta, end, dxd, dk, dbeta, dlam, *tables,
                                     eps=p.eps, floor=p.floor, T=T, NT=p.NT, NTT=p.NTT, H=H, K=K, V=V, BT=p.BT,
                                     BK=p.BK, BV=p.BV, NK=NK, NV=NV, RAW=p.raw, NORMALIZE=p.normalize,
                                     SCALE_RIDGE=p.scale_ridge, **_flags(p), **_samples(p), **lean)
    return dq, dk, dv, dbeta, dlam, dS0


def _zero_tails(t: Tensor, p: _Plan) -> Tensor:
    """``t [B, T, ...]`` with the last ``p.delay`` rows of each sequence (each row, or each of the packed sequences)
    zero: with delayed pairs no token writes those rows' pairs, so no kernel writes their gradients."""
    if not p.delay:
        return t
    if p.cu_seqlens is None:
        t[:, max(t.shape[1] - p.delay, 0):] = 0
    else:  # a row of the sequence before a short one is in its own tail: zero either way
        ends = p.cu_seqlens[1:].long()
        t[:, (ends[:, None] - torch.arange(1, p.delay + 1, device=t.device)).clamp(min=0).flatten()] = 0
    return t


class _InnerProduct(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, S0: Tensor, last_key: Tensor,
                plan: _Plan) -> tuple[Tensor, Tensor]:
        o, ST, eta, G, h = _forward(plan, q, k, v, beta, lam, S0, last_key)
        ctx.save_for_backward(q, k, v, beta, lam, last_key, eta, G, h)
        ctx.plan = plan
        return o, ST

    @staticmethod
    def backward(ctx, do: Tensor, dST: Tensor | None):
        q, k, v, beta, lam, last_key, eta, G, h = ctx.saved_tensors
        dST = None if dST is None else dST.contiguous()
        grads = _backward(ctx.plan, q, k, v, beta, lam, last_key, eta, G, h, do.contiguous(), dST)
        return (*grads, None, None)


def triton_inner_product(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, cfg: RuleConfig,
                         state: FastWeightState, fresh: bool, chunk_size: int = 64,
                         cu_seqlens: Tensor | None = None,
                         sample_id: Tensor | None = None) -> tuple[Tensor, FastWeightState]:
    """falcon-1a / falcon-2a with fused Triton chunk kernels (forward and backward).

    q, k ``[B, T, H, Dk]``, v ``[B, T, H, Dv]``, beta ``[B, T, H]`` (``[B, T, H, Dv]`` for 2a), lam ``[B, T, H]``
    in their own dtype; ``state`` a full fp32 state (one row per packed sequence with ``cu_seqlens``).
    ``sample_id`` (falcon-1a; instead of ``cu_seqlens``): ``[B, T]`` integers non-decreasing along each row, the
    samples of a row kept apart (``decayed_attention``'s), each new one fresh; ``state`` enters each row's first
    sample and the final state is each row's after its last token.
    Returns o in q's dtype and the final state (S in fp32). The op has checked that the kernels take the inputs
    (``falcon_lab.kernels.common.checks.fused_refusal``).
    """
    B, T, H, Dk = q.shape
    Dv = v.shape[-1]
    if sample_id is not None:
        if cu_seqlens is not None or cfg.per_channel:
            raise ValueError(f"sample_id runs {cfg.rule} on the kernels without cu_seqlens, for scalar gates only "
                             "(falcon-1a)")
        sample_id = sample_id.to(device=q.device, dtype=torch.int32).contiguous()
    cu_seqlens, chunk_indices, chunk_offsets, N, NT, NTT = _tables(q, cu_seqlens, chunk_size)
    plan = _Plan(per_channel=cfg.per_channel, shifted=cfg.shifted, fresh=fresh, raw=cfg.timing == "raw",
                 normalize=cfg.normalize, scale_ridge=cfg.scale_coupled_ridge, eps=float(cfg.eps),
                 floor=float(cfg.decay_floor), BT=chunk_size, BR=SUB if cfg.per_channel else chunk_size,
                 BK=min(next_power_of_2(Dk), 64), BV=min(next_power_of_2(Dv), 64), T=T, NT=NT, NTT=NTT, N=N,
                 cu_seqlens=cu_seqlens, chunk_indices=chunk_indices, chunk_offsets=chunk_offsets,
                 prec=PRECISION[q.dtype], sample_id=sample_id)
    S0 = state.S.to(torch.float32).contiguous()
    last_key = state.last_key.to(torch.float32).contiguous()
    o, ST = _InnerProduct.apply(q.contiguous(), k.contiguous(), v.contiguous(), beta.contiguous(), lam.contiguous(),
                                S0, last_key, plan)
    if cu_seqlens is None:
        final_key = k[:, -1]
    else:
        final_key = k[0, cu_seqlens[1:].long() - 1]
    final = FastWeightState(S=ST, last_key=final_key.to(torch.float32),
                            x_tail=ST.new_zeros(N, H, 0, Dk), v_tail=ST.new_zeros(N, H, 0, Dv),
                            tail_mask=torch.zeros(N, 0, dtype=torch.bool, device=q.device))
    return o, final


def decayed_forward(plan: _Plan, q: Tensor, k: Tensor, v: Tensor, eta: Tensor, log_gamma: Tensor,
                    S0: Tensor) -> tuple[Tensor, Tensor, tuple[Tensor, ...]]:
    """``decayed_attention``'s forward on a plan of ``decayed_plan``'s (contiguous inputs, η, log γ and S0 float32):
    o, the final state, and what ``decayed_backward`` takes."""
    G = _chunk_prefix(log_gamma, plan)
    last_key = S0.new_zeros(S0.shape[0], k.shape[2], k.shape[-1])
    o, ST, _, _, h = _forward(plan, q, k, v, None, None, S0, last_key, gates=(eta, G))
    return o, ST, (q, k, v, last_key, eta, G, h)


def decayed_backward(plan: _Plan, kept: tuple[Tensor, ...], do: Tensor, dST: Tensor | None,
                     into: tuple[Tensor, Tensor, Tensor] | None = None) -> tuple[Tensor, ...]:
    """dq, dk, dv, dη, d log γ, dS0 from ``decayed_forward``'s ``kept``; ``into``: dq, dk, dv to add them into."""
    q, k, v, last_key, eta, G, h = kept
    return _backward(plan, q, k, v, None, None, last_key, eta, G, h, do.contiguous(),
                     None if dST is None else dST.contiguous(), into)


class _Decayed(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, eta: Tensor, log_gamma: Tensor, S0: Tensor,
                plan: _Plan) -> tuple[Tensor, Tensor]:
        o, ST, kept = decayed_forward(plan, q, k, v, eta, log_gamma, S0)
        ctx.save_for_backward(*kept)
        ctx.plan = plan
        return o, ST

    @staticmethod
    def backward(ctx, do: Tensor, dST: Tensor | None):
        return (*decayed_backward(ctx.plan, ctx.saved_tensors, do, dST), None)


def _chunk_prefix(log_gamma: Tensor, plan: _Plan) -> Tensor:
    """G: the cumulative log-carries within each chunk (of each packed sequence, with cu_seqlens), float32."""
    B, T, H = log_gamma.shape
    if plan.sample_id is not None:  # within each chunk and each sample of rows of samples
        G = helpers.new_buffer(B, T, H, dtype=torch.float32, device=log_gamma.device)
        _sample_prefix_kernel[(plan.NT, B * H)](log_gamma, plan.sample_id, G, T, H, BT=plan.BT)
        return G
    if plan.cu_seqlens is None:
        pad = plan.NT * plan.BT - T
        G = F.pad(log_gamma, (0, 0, 0, pad)).view(B, plan.NT, plan.BT, H).cumsum(2).view(B, -1, H)[:, :T]
        return G.contiguous()
    # the chunks of packed sequences start at each sequence's start and every BT tokens after it: each token laid
    # in its chunk's row of a [NTT, BT] table, the rows summed along BT as the padded rows are (a running sum over
    # all T tokens would be one scan of T steps a head: 65 ms a step at T = 65536 on an H100, records/bench/
    # step-apart-2026-12-05), and read back
    bounds = plan.cu_seqlens.long()
    seq = torch.repeat_interleave(torch.arange(plan.N, device=log_gamma.device), bounds[1:] - bounds[:-1],
                                  output_size=T)  # output_size: no host sync
    within = torch.arange(T, device=log_gamma.device) - bounds[:-1][seq]
    row, j = plan.chunk_offsets.long()[seq] + within // plan.BT, within % plan.BT
    table = log_gamma.new_zeros(B, plan.NTT, plan.BT, H)
    table[:, row, j] = log_gamma
    return table.cumsum(2)[:, row, j].contiguous()


def decayed_attention(q: Tensor, k: Tensor, v: Tensor, eta: Tensor, log_gamma: Tensor, S0: Tensor, raw: bool = True,
                      chunk_size: int = 64, cu_seqlens: Tensor | None = None,
                      sample_id: Tensor | None = None, delay: int = 0) -> tuple[Tensor, Tensor]:
    """Decayed linear attention with its gates given as they are, on the fused kernels of falcon-1a:

        S_t = γ_t S_{t−1} + η_t k_t v_tᵀ,    o_t = S_tᵀ q_t (``raw``) or S_{t−1}ᵀ q_t,

    q, k ``[B, T, H, Dk]``, v ``[B, T, H, Dv]`` in one dtype, η and log γ ``[B, T, H]`` float32 (log γ ≤ 0), S0
    ``[B, H, Dk, Dv]`` float32. Returns (o in q's dtype, the final state in float32); differentiable in every
    input (dη and d log γ from the falcon-1a backward's carry identity, ``_bwd_gates_kernel``). Pairs are the
    same-time (k_t, v_t) and every token is a pair. ``cu_seqlens``: ``[N + 1]`` int offsets of N sequences packed
    along T of a batch of one, each from its row of S0 ``[N, H, Dk, Dv]``; the final state has N rows. falcon-3a
    runs on it (falcon_lab/kernels/window/fused.py).

    ``sample_id``: ``[B, T]`` integers, non-decreasing along each row (not checked: that would read the device),
    instead of ``cu_seqlens``: the rows as they are, in full chunks, with the samples of a row kept apart (a read
    sees its own sample's writes only; each new id starts from a zero state). S0 ``[B, H, Dk, Dv]`` enters each
    row's first sample and the final state is each row's after its last token. Every shape follows B and T alone
    and nothing is read on the host (``decayed_plan``).

    ``delay``: token t writes the pair of token t − delay instead, none before its sequence's (or row's) start:
    S_t = γ_t S_{t−1} + η_t k_{t−delay} v_{t−delay}ᵀ, as if k and v were moved ``delay`` tokens later with zeros in
    front, read where they lie (no moved copies forward, nor their gradients moved back); within a row of samples
    the pair may be an earlier sample's, as in the moved copies (the gains say which count). falcon-3a's delayed
    pass (delay W − 1)."""
    plan = decayed_plan(q, k, v, eta, log_gamma, S0, raw, chunk_size, cu_seqlens, sample_id, delay)
    if plan is None:
        return _in_slices(q, k, v, eta, log_gamma, S0, raw, chunk_size, cu_seqlens, sample_id, delay)
    f32 = torch.float32
    return _Decayed.apply(q.contiguous(), k.contiguous(), v.contiguous(), eta.to(f32).contiguous(),
                          log_gamma.to(f32).contiguous(), S0.to(f32).contiguous(), plan)


def decayed_plan(q: Tensor, k: Tensor, v: Tensor, eta: Tensor, log_gamma: Tensor, S0: Tensor, raw: bool,
                 chunk_size: int, cu_seqlens: Tensor | None, sample_id: Tensor | None, delay: int) -> _Plan | None:
    """``decayed_attention``'s inputs checked and the plan of its kernels, or None where CUDA's launch limits want
    the rows or sequences in slices (``falcon_lab.kernels.common.grid``). Rows of samples (``sample_id``) read
    nothing on the host."""
    B, T, H, Dk = q.shape
    Dv = v.shape[-1]
    if eta.shape != (B, T, H) or log_gamma.shape != (B, T, H):
        raise ValueError(f"eta and log_gamma must be [B, T, H] = {[B, T, H]}, got {list(eta.shape)} and "
                         f"{list(log_gamma.shape)}")
    if delay < 0:
        raise ValueError(f"delay must be >= 0, got {delay}")
    blocks = dict(per_channel=False, shifted=False, fresh=False, raw=raw, normalize=False, scale_ridge=False,
                  eps=0.0, floor=0.0, BT=chunk_size, BR=chunk_size, BK=min(next_power_of_2(Dk), 64),
                  BV=min(next_power_of_2(Dv), 64), T=T, prec=PRECISION[q.dtype], delay=delay)
    if sample_id is not None:
        if cu_seqlens is not None:
            raise ValueError("decayed_attention takes cu_seqlens or sample_id, not both")
        check_sample_ids(sample_id, B, T)
        if S0.shape != (B, H, Dk, Dv):
            raise ValueError(f"S0 must be [B, H, Dk, Dv] = {[B, H, Dk, Dv]} with sample_id, got {list(S0.shape)}")
        if len(grid.row_groups(B, T, H, chunk_size)) > 1:
            return None
        NT = triton.cdiv(T, chunk_size)
        return _Plan(**blocks, NT=NT, NTT=B * NT, N=B, cu_seqlens=None, chunk_indices=None, chunk_offsets=None,
                     sample_id=packed.ids_int32(sample_id, q.device))
    groups = (grid.row_groups(B, T, H, chunk_size) if cu_seqlens is None
              else grid.sequence_groups(cu_seqlens, H, chunk_size))
    if len(groups) > 1:
        return None
    cu_seqlens, chunk_indices, chunk_offsets, N, NT, NTT = _tables(q, cu_seqlens, chunk_size)
    if S0.shape != (N, H, Dk, Dv):
        raise ValueError(f"S0 must be [N, H, Dk, Dv] = {[N, H, Dk, Dv]} (N the sequences), got {list(S0.shape)}")
    return _Plan(**blocks, NT=NT, NTT=NTT, N=N, cu_seqlens=cu_seqlens, chunk_indices=chunk_indices,
                 chunk_offsets=chunk_offsets)


def _in_slices(q: Tensor, k: Tensor, v: Tensor, eta: Tensor, log_gamma: Tensor, S0: Tensor, raw: bool,
               chunk_size: int, cu_seqlens: Tensor | None, sample_id: Tensor | None,
               delay: int) -> tuple[Tensor, Tensor]:
    """``decayed_attention`` over slices of rows (of their ids) or of packed sequences that CUDA can launch."""
    B, T, H = q.shape[:3]
    if cu_seqlens is None:
        return grid.joined([decayed_attention(*(t[i:j] for t in (q, k, v, eta, log_gamma, S0)), raw, chunk_size,
                                              sample_id=None if sample_id is None else sample_id[i:j], delay=delay)
                            for i, j in grid.row_groups(B, T, H, chunk_size)], dim=0)
    bounds = packed.offsets(cu_seqlens)
    return grid.joined([decayed_attention(*(t[:, bounds[i]:bounds[j]] for t in (q, k, v, eta, log_gamma)),
                                          S0[i:j], raw, chunk_size, cu_seqlens[i:j + 1] - cu_seqlens[i], delay=delay)
                        for i, j in grid.sequence_groups(cu_seqlens, H, chunk_size)], dim=1)
