"""The public functional ops: ``fast_weight_rule`` (a whole sequence) and ``fast_weight_step`` (one token)."""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from kernels.common.checks import check_inputs, start_state
from kernels.common.config import RuleConfig
from kernels.falcon.naive import advance, recurrent_forward
from kernels.common.state import FastWeightState
from kernels.common.precision import autocast_off, compute_dtype

Backend = Callable[..., tuple[Tensor, FastWeightState]]


def _masked(*args, **opts):
    from kernels.falcon.masked import masked_forward

    return masked_forward(*args)


def _chunk(*args, chunk_size: int = 64, **opts):
    from kernels.falcon.chunk import chunk_forward

    return chunk_forward(*args, chunk_size=chunk_size)


def _recurrent(*args, **opts):
    return recurrent_forward(*args)


def _triton(*args, chunk_size: int = 64, cu_seqlens: Tensor | None = None, **opts):
    from kernels.falcon.fused import triton_forward

    return triton_forward(*args, chunk_size=chunk_size, cu_seqlens=cu_seqlens)


BACKENDS: dict[str, Backend] = {"recurrent": _recurrent, "masked": _masked, "chunk": _chunk,
                                "triton": _triton}
# backends that take the inputs in their own dtype and fuse the pairing, η and γ themselves
NATIVE_DTYPE_BACKENDS = ("triton",)


@autocast_off
def fast_weight_rule(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, *, rule: str, window: int = 4,
    eps: float = 1e-6, decay_floor: float = 1e-3, scale_coupled_ridge: bool = False,
    alignment: str = "shifted", timing: str = "raw", normalize: bool = True, backend: str = "recurrent",
    chunk_size: int = 64, initial_state: FastWeightState | Tensor | None = None,
    output_final_state: bool = False, validate: bool = False, cu_seqlens: Tensor | None = None,
) -> tuple[Tensor, FastWeightState | None]:
    """Run a Falcon rule over a sequence.

    Args:
        q, k: ``[B, T, H, Dk]`` featurised queries and keys. v: ``[B, T, H, Dv]``.
        beta: gains β ∈ (0, 2), ``[B, T, H]`` (``[B, T, H, Dv]`` for falcon-2/2a); with ``normalize=False``
            it is the step size η itself (the ctxη reading).
        lam: ridge λ_t ``[B, T, H]`` (λ̄_t when ``scale_coupled_ridge``).
        rule: one of ``RULES``. window: B of falcon-3/3a (ignored by the others).
        eps: ε of the step-size denominator. decay_floor: ε_γ, the carry never drops below it.
        alignment: ``"shifted"`` (x_t = k_{t−1}) or ``"same_time"`` (x_t = k_t).
        timing: ``"raw"`` (read S_t) or ``"rbw"`` (read S_{t−1}).
        backend: ``"recurrent"`` (the oracle), ``"masked"`` (O(T²)), ``"chunk"`` (chunk-parallel),
            ``"triton"`` (fused kernels for falcon-1/2/1a/2a/3a) or ``"auto"`` (triton where it applies, else chunk).
        initial_state: a ``FastWeightState`` to continue from, a bare S (a fresh sequence starting from S),
            or None (a fresh sequence from S = 0).
        output_final_state: return the state for exact continuation.
        validate: also check value ranges (β ∈ (0, 2), λ ≥ 0, finite); costs a device sync.
        cu_seqlens: ``[N + 1]`` int offsets of N sequences packed along T of a batch of one (as in fla);
            each sequence starts fresh (or from row n of ``initial_state``) and the final state has N rows.

    Returns:
        o ``[B, T, H, Dv]`` in q's dtype, and the final state (or None).
    """
    cfg = RuleConfig(rule=rule, window=window, eps=eps, decay_floor=decay_floor,
                     scale_coupled_ridge=scale_coupled_ridge, alignment=alignment, timing=timing,
                     normalize=normalize)
    if backend not in BACKENDS and backend != "auto":
        raise ValueError(f"backend={backend!r}; accepted: auto, {', '.join(BACKENDS)}")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be an integer >= 1, got {chunk_size!r}")
    check_inputs(q, k, v, beta, lam, cfg, validate)
    if backend == "auto":
        from kernels.falcon.fused import auto_backend

        backend = auto_backend(q, v, cfg, chunk_size, packed=cu_seqlens is not None)
    if cfg.per_channel and beta.dim() == 3:
        beta = beta[..., None].expand(*beta.shape, v.shape[-1])
    if cu_seqlens is not None:
        bounds = check_cu_seqlens(cu_seqlens, q)
        if backend not in NATIVE_DTYPE_BACKENDS:
            return _packed(q, k, v, beta, lam, cfg, backend, chunk_size, initial_state, output_final_state,
                           bounds)
    out_dtype, dtype = q.dtype, compute_dtype(q.dtype)
    if backend in NATIVE_DTYPE_BACKENDS:
        state, fresh = start_state(q, v, initial_state, dtype, span=cfg.span,
                                   batch=None if cu_seqlens is None else cu_seqlens.numel() - 1)
        o, final = BACKENDS[backend](q, k, v, beta, lam, cfg, state, fresh, chunk_size=chunk_size,
                                     cu_seqlens=cu_seqlens)
        return o, (final if output_final_state else None)
    state, fresh = start_state(q, v, initial_state, dtype, span=cfg.span)
    q, k, v, beta, lam = (t.to(dtype) for t in (q, k, v, beta, lam))
    o, final = BACKENDS[backend](q, k, v, beta, lam, cfg, state, fresh, chunk_size=chunk_size)
    return o.to(out_dtype), (final if output_final_state else None)


def check_cu_seqlens(cu_seqlens: Tensor, q: Tensor) -> list[int]:
    """Offsets of packed sequences: 1-D integers, 0 first, T last, strictly increasing; batch of one."""
    if not isinstance(cu_seqlens, Tensor) or cu_seqlens.dim() != 1 or cu_seqlens.is_floating_point() \
            or cu_seqlens.numel() < 2:
        raise ValueError("cu_seqlens must be a 1-D integer tensor of N + 1 offsets [0, ..., T]")
    if q.shape[0] != 1:
        raise ValueError(f"cu_seqlens packs sequences along T of a batch of one; q has batch {q.shape[0]}")
    bounds = [int(b) for b in cu_seqlens.tolist()]
    if bounds[0] != 0 or bounds[-1] != q.shape[1] or any(b >= e for b, e in zip(bounds, bounds[1:])):
        raise ValueError(f"cu_seqlens must rise strictly from 0 to T = {q.shape[1]}, got {bounds}")
    return bounds


def _packed(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, cfg: RuleConfig, backend: str,
            chunk_size: int, initial_state: FastWeightState | Tensor | None, output_final_state: bool,
            bounds: list[int]) -> tuple[Tensor, FastWeightState | None]:
    """Packed sequences for the reference backends: one call per sequence (exact, not fast); for outputs alone
    from fresh states, one call over the sequences laid one to a row and padded at their ends (padding after a
    sequence cannot reach its outputs)."""
    if initial_state is None and not output_final_state and len(bounds) > 2:
        sizes = [e - b for b, e in zip(bounds, bounds[1:])]
        lengths = torch.tensor(sizes, device=q.device)
        row = torch.repeat_interleave(torch.arange(len(lengths), device=q.device), lengths)
        col = torch.arange(q.shape[1], device=q.device) - torch.repeat_interleave(
            torch.tensor(bounds[:-1], device=q.device), lengths)

        def rows(t: Tensor) -> Tensor:
            out = t.new_zeros(len(sizes), max(sizes), *t.shape[2:])
            out[row, col] = t[0]
            return out

        o, _ = fast_weight_rule(*(rows(t) for t in (q, k, v, beta, lam)), rule=cfg.rule, window=cfg.window,
                                eps=cfg.eps, decay_floor=cfg.decay_floor,
                                scale_coupled_ridge=cfg.scale_coupled_ridge, alignment=cfg.alignment,
                                timing=cfg.timing, normalize=cfg.normalize, backend=backend, chunk_size=chunk_size)
        return o[row, col][None], None
    outs, finals = [], []
    for n, (b, e) in enumerate(zip(bounds, bounds[1:])):
        init = None
        if initial_state is not None:
            init = (initial_state[n:n + 1] if isinstance(initial_state, Tensor)
                    else FastWeightState(*(t[n:n + 1] for t in initial_state)))
        o, fin = fast_weight_rule(q[:, b:e], k[:, b:e], v[:, b:e], beta[:, b:e], lam[:, b:e], rule=cfg.rule,
                                  window=cfg.window, eps=cfg.eps, decay_floor=cfg.decay_floor,
                                  scale_coupled_ridge=cfg.scale_coupled_ridge, alignment=cfg.alignment,
                                  timing=cfg.timing, normalize=cfg.normalize, backend=backend,
                                  chunk_size=chunk_size, initial_state=init, output_final_state=True)
        outs.append(o)
        finals.append(fin)
    final = FastWeightState(*(torch.cat(parts, dim=0) for parts in zip(*finals)))
    return torch.cat(outs, dim=1), (final if output_final_state else None)


@autocast_off
def fast_weight_step(
    state: FastWeightState | None, q_t: Tensor, k_t: Tensor, v_t: Tensor, beta_t: Tensor, lam_t: Tensor, *,
    rule: str, window: int = 4, eps: float = 1e-6, decay_floor: float = 1e-3,
    scale_coupled_ridge: bool = False, alignment: str = "shifted", timing: str = "raw",
    normalize: bool = True,
) -> tuple[Tensor, FastWeightState]:
    """Advance one token in O(1) for generation. q_t, k_t ``[B, H, Dk]``; v_t ``[B, H, Dv]``;
    beta_t ``[B, H]`` (``[B, H, Dv]`` for 2/2a); lam_t ``[B, H]``. ``state=None`` starts a fresh sequence.
    Returns (o_t ``[B, H, Dv]``, the new state). Equal to ``fast_weight_rule`` over the same tokens."""
    cfg = RuleConfig(rule=rule, window=window, eps=eps, decay_floor=decay_floor,
                     scale_coupled_ridge=scale_coupled_ridge, alignment=alignment, timing=timing,
                     normalize=normalize)
    # one token as a sequence of T = 1, so the sequence checks apply
    q, k, v, beta, lam = (t.unsqueeze(1) if isinstance(t, Tensor) else t
                          for t in (q_t, k_t, v_t, beta_t, lam_t))
    check_inputs(q, k, v, beta, lam, cfg, validate=False)
    dtype = compute_dtype(q.dtype)
    st, fresh = start_state(q, v, state, dtype, span=cfg.span)
    if cfg.per_channel and beta.dim() == 3:
        beta = beta[..., None].expand(*beta.shape, v.shape[-1])
    q, k, v, beta, lam = (t[:, 0].to(dtype) for t in (q, k, v, beta, lam))
    x_t = st.last_key if cfg.shifted else k
    is_pair = not (fresh and cfg.shifted)
    xw = torch.cat([st.x_tail, x_t[:, :, None]], dim=2)
    vw = torch.cat([st.v_tail, v[:, :, None]], dim=2)
    new_slot = torch.full((q.shape[0], 1), is_pair, dtype=torch.bool, device=q.device)
    mw = torch.cat([st.tail_mask, new_slot], dim=1)
    o, S = advance(cfg, st.S, xw, vw, mw, q, beta, lam)
    new = FastWeightState(S=S, last_key=k, x_tail=xw[:, :, 1:], v_tail=vw[:, :, 1:], tail_mask=mw[:, 1:])
    return o.to(q_t.dtype), new
