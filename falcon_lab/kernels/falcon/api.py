"""The public functional ops: ``fast_weight_rule`` (a whole sequence) and ``fast_weight_step`` (one token).

Options and tensors are checked here, once (``falcon_lab.kernels.common.checks``); the forms behind the dispatch table
(``falcon_lab.kernels.falcon.dispatch``) trust them.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from falcon_lab.kernels.common import packed
from falcon_lab.kernels.common.checks import (check_choice, check_cu_seqlens, check_inputs, check_rule_options,
                                   check_sample_ids, check_sequence_options, fused_refusal, start_state)
from falcon_lab.kernels.common.config import BACKENDS, RULES, RuleConfig
from falcon_lab.kernels.common.precision import autocast_off, compute_dtype
from falcon_lab.kernels.common.state import FastWeightState
from falcon_lab.kernels.falcon import dispatch


def _config(rule: str, window: int, eps: float, decay_floor: float, scale_coupled_ridge: bool, alignment: str,
            timing: str, beta: Tensor | None, eta: Tensor | None) -> tuple[RuleConfig, Tensor]:
    """The checked rule configuration, and the tensor that drives the step: the gain β, or η itself."""
    check_choice("rule", rule, RULES)  # the registered rules (falcon_lab.kernels.common.spec)
    check_sequence_options(alignment=alignment, timing=timing)
    check_rule_options(window=window, eps=eps, decay_floor=decay_floor)
    if (beta is None) == (eta is None):
        raise ValueError("pass exactly one of beta (the gain β, normalised by the write energy) and eta (the step "
                         "size η itself, the ctxη reading); got " + ("neither" if beta is None else "both"))
    cfg = RuleConfig(rule=rule, window=window, eps=eps, decay_floor=decay_floor,
                     scale_coupled_ridge=scale_coupled_ridge, alignment=alignment, timing=timing,
                     normalize=eta is None)
    return cfg, beta if eta is None else eta


@autocast_off
def fast_weight_rule(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor | None = None, lam: Tensor | None = None, *, rule: str,
    eta: Tensor | None = None, window: int = 4, eps: float = 1e-6, decay_floor: float = 1e-3,
    scale_coupled_ridge: bool = False, alignment: str = "shifted", timing: str = "raw", backend: str = "recurrent",
    chunk_size: int = 64, initial_state: FastWeightState | Tensor | None = None, output_final_state: bool = False,
    validate: bool = False, cu_seqlens: Tensor | None = None, sample_id: Tensor | None = None,
) -> tuple[Tensor, FastWeightState | None]:
    """Run a Falcon rule over a sequence.

    Args:
        q, k: ``[B, T, H, Dk]`` featurised queries and keys. v: ``[B, T, H, Dv]``.
        beta: gains β ∈ (0, 2), ``[B, T, H]`` (``[B, T, H, Dv]`` for falcon-2/2a); the step size is
            η = β / (E + λ + ε).
        lam: ridge λ_t ``[B, T, H]`` (λ̄_t when ``scale_coupled_ridge``).
        rule: one of ``RULES``.
        eta: in place of ``beta``, the step size η ≥ 0 itself, shaped like beta (the ctxη reading: no energy
            normalisation; the carry is still γ = 1 − min(η λ, 1 − ε_γ)).
        window: B of falcon-3/3a (ignored by the others).
        eps: ε of the step-size denominator. decay_floor: ε_γ, the carry never drops below it.
        alignment: ``"shifted"`` (x_t = k_{t−1}) or ``"same_time"`` (x_t = k_t).
        timing: ``"raw"`` (read S_t) or ``"rbw"`` (read S_{t−1}).
        backend: ``"recurrent"`` (the oracle), ``"masked"`` (O(T²)), ``"chunk"`` (chunk-parallel),
            ``"triton"`` (fused kernels for every rule) or ``"auto"`` (triton where it applies, else chunk).
        initial_state: a ``FastWeightState`` to continue from, a bare S (a fresh sequence starting from S),
            or None (a fresh sequence from S = 0).
        output_final_state: return the state for exact continuation.
        validate: also check value ranges (β ∈ (0, 2) or η ≥ 0, λ ≥ 0, finite); costs a device sync.
        cu_seqlens: ``[N + 1]`` int offsets of N sequences packed along T of a batch of one (as in fla);
            each sequence starts fresh (or from row n of ``initial_state``) and the final state has N rows.
        sample_id: instead, ``[B, T]`` integers non-decreasing along each row (not checked: that would read the
            device): the samples of each row run apart, each fresh, outputs alone (no state in or out). A rule
            whose spec says ``by_sample_id`` (all but falcon-2a) runs them on ``"triton"``
            as the rows they are, in full chunks, with no host read; every other rule or backend as the packed
            sequences of one row of B·T tokens (their ``cu_seqlens``, read on the host).

    Returns:
        o ``[B, T, H, Dv]`` in q's dtype, and the final state (or None).
    """
    cfg, gain = _config(rule, window, eps, decay_floor, scale_coupled_ridge, alignment, timing, beta, eta)
    check_sequence_options(alignment=alignment, timing=timing, backend=backend, backends=("auto", *BACKENDS),
                           chunk_size=chunk_size)
    check_inputs(q, k, v, gain, lam, cfg, validate)
    if sample_id is not None:
        return _by_sample_id(q, k, v, gain, lam, cfg, backend, chunk_size, initial_state, output_final_state,
                             cu_seqlens, sample_id)
    bounds = None if cu_seqlens is None else check_cu_seqlens(cu_seqlens, q)
    if backend == "auto":
        backend = dispatch.auto_backend(q, v, cfg, chunk_size, packed=cu_seqlens is not None)
    if backend == "triton":
        refusal = fused_refusal(q, v, cfg, chunk_size, cu_seqlens is not None, gain, lam)
        if refusal:
            raise ValueError(refusal)
    if cfg.per_channel and gain.dim() == 3:
        gain = gain[..., None].expand(*gain.shape, v.shape[-1])
    return _run(q, k, v, gain, lam, cfg, backend, chunk_size, initial_state, output_final_state, bounds,
                cu_seqlens)


def _by_sample_id(q: Tensor, k: Tensor, v: Tensor, gain: Tensor, lam: Tensor, cfg: RuleConfig, backend: str,
                  chunk_size: int, initial_state: FastWeightState | Tensor | None, output_final_state: bool,
                  cu_seqlens: Tensor | None, sample_id: Tensor) -> tuple[Tensor, None]:
    """``fast_weight_rule`` over rows of samples told apart by ``sample_id``."""
    B, T = q.shape[:2]
    if cu_seqlens is not None or initial_state is not None or output_final_state:
        raise ValueError("sample_id runs fresh samples with no state in or out, and takes no cu_seqlens")
    check_sample_ids(sample_id, B, T)
    if backend == "auto":
        backend = dispatch.auto_backend(q, v, cfg, chunk_size, packed=True)
    if backend == "triton":
        refusal = fused_refusal(q, v, cfg, chunk_size, True, gain, lam)
        if refusal:
            raise ValueError(refusal)
    if cfg.per_channel and gain.dim() == 3:
        gain = gain[..., None].expand(*gain.shape, v.shape[-1])
    if backend == "triton" and cfg.spec.by_sample_id:
        state, fresh = start_state(q, v, None, compute_dtype(q.dtype), span=cfg.span)
        return dispatch.run(backend, q, k, v, gain, lam, cfg, state, fresh, chunk_size, sample_id=sample_id)[0], None
    first = torch.ones_like(sample_id, dtype=torch.bool)
    first[:, 1:] = sample_id[:, 1:] != sample_id[:, :-1]
    starts = first.flatten().nonzero().flatten()
    cu_seqlens = torch.cat([starts, starts.new_full((1,), B * T)])
    flat = [t.flatten(0, 1)[None] for t in (q, k, v, gain, lam)]
    o, _ = _run(*flat, cfg, backend, chunk_size, None, False, check_cu_seqlens(cu_seqlens, flat[0]), cu_seqlens)
    return o[0].unflatten(0, (B, T)), None


def _run(q: Tensor, k: Tensor, v: Tensor, gain: Tensor, lam: Tensor, cfg: RuleConfig, backend: str,
         chunk_size: int, initial_state: FastWeightState | Tensor | None, output_final_state: bool,
         bounds: tuple[int, ...] | None, cu_seqlens: Tensor | None) -> tuple[Tensor, FastWeightState | None]:
    """Checked inputs to the form of (rule, backend): the fused forms take them in their own dtype (and packed
    sequences whole, but for the window rules'), the others in the compute dtype (and packed sequences apart)."""
    dtype = compute_dtype(q.dtype)
    packed_form = cfg.spec.triton_packed
    if backend == "triton" and packed_form is not None and initial_state is None and not output_final_state:
        # fresh sequences, outputs alone (a model's training and evaluation): packed ones as one row, no padding
        return packed_form(q, k, v, gain, lam, cfg, chunk_size, cu_seqlens), None
    if backend == "triton" and cfg.windowed and bounds is not None:
        # falcon-3/3a's kernels carry one window tail per row, not per packed sequence: the sequences go one to a
        # row (``_packed``), padded at their ends, through the same kernels
        return _packed(q, k, v, gain, lam, cfg, backend, chunk_size, initial_state, output_final_state, bounds,
                       cu_seqlens)
    if backend == "triton":
        state, fresh = start_state(q, v, initial_state, dtype, span=cfg.span,
                                   batch=None if bounds is None else len(bounds) - 1)
        o, final = dispatch.run(backend, q, k, v, gain, lam, cfg, state, fresh, chunk_size, cu_seqlens)
        return o, (final if output_final_state else None)
    if bounds is not None:
        return _packed(q, k, v, gain, lam, cfg, backend, chunk_size, initial_state, output_final_state, bounds,
                       cu_seqlens)
    state, fresh = start_state(q, v, initial_state, dtype, span=cfg.span)
    out_dtype = q.dtype
    q, k, v, gain, lam = (t.to(dtype) for t in (q, k, v, gain, lam))
    o, final = dispatch.run(backend, q, k, v, gain, lam, cfg, state, fresh, chunk_size)
    return o.to(out_dtype), (final if output_final_state else None)


class _Rows(NamedTuple):
    """Packed sequences laid one to a row in runs of like lengths: run r holds ``shapes[r]`` = (rows, longest).
    ``gather``: for every slot of the runs' rows flattened one after another, the place of its token in the packed
    row, or T (a zero row appended to it) for padding; ``back``: for every token of the packed row, its slot there."""

    shapes: list[tuple[int, int]]
    gather: Tensor
    back: Tensor


def _rows_by_length(cu_seqlens: Tensor, device: torch.device) -> _Rows:
    """``_length_groups`` of the packed sequences as two integer indices, made on the host once per ``cu_seqlens``
    (``falcon_lab.kernels.common.packed``) and copied to ``device`` in one copy: every layer lays its inputs out with
    one gather a tensor and its outputs back with one, forward and backward, whatever the number of runs, with no
    boolean mask (each a host wait on a GPU)."""
    def make() -> _Rows:
        bounds = packed.offsets(cu_seqlens)
        T = bounds[-1]
        shapes, ats, slots, base = [], [], [], 0
        for group in _length_groups(bounds):
            starts = np.array([bounds[n] for n in group], dtype=np.int64)
            sizes = np.array([bounds[n + 1] - bounds[n] for n in group], dtype=np.int64)
            longest = int(sizes.max())
            within = np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes, sizes)
            ats.append(np.repeat(starts, sizes) + within)
            slots.append(base + np.repeat(np.arange(len(group)) * longest, sizes) + within)
            shapes.append((len(group), longest))
            base += len(group) * longest
        at, slot = np.concatenate(ats), np.concatenate(slots)
        gather = np.full(base, T, dtype=np.int64)
        gather[slot] = at
        back = np.empty(T, dtype=np.int64)
        back[at] = slot
        # one copy to the device for both indices (each copy from host memory waits for the device)
        gather_d, back_d = torch.from_numpy(np.concatenate([gather, back])).to(device).split([base, T])
        return _Rows(shapes, gather_d, back_d)

    return packed.memo(cu_seqlens, ("rows by length", str(device)), make)


class _Relay(torch.autograd.Function):
    """``cat([x, 0])[to]``: the rows of ``x`` (a zero row at ``len(x)``) at the places ``to`` names, where every
    row of ``x`` is named exactly once and ``frm`` is the inverse map (the place of each row of ``x`` in the result).
    Its gradient is the same gather the other way, ``cat([g, 0])[frm]``, not the scatter-add autograd makes of an
    index (a sort over every index and one thread a run of duplicates: the padding slots all name the zero row)."""

    @staticmethod
    def forward(ctx, x: Tensor, to: Tensor, frm: Tensor) -> Tensor:
        ctx.save_for_backward(to, frm)
        return torch.cat([x, x.new_zeros(1, *x.shape[1:])]).index_select(0, to)

    @staticmethod
    def backward(ctx, g: Tensor) -> tuple[Tensor, None, None]:
        to, frm = ctx.saved_tensors
        return torch.cat([g, g.new_zeros(1, *g.shape[1:])]).index_select(0, frm), None, None


def _length_groups(bounds: tuple[int, ...], groups: int = 4) -> list[list[int]]:
    """The packed sequences sorted by length and cut into up to ``groups`` runs of about as many each: laid one to a
    row, each run is padded to its own longest (about 1.25 times the tokens for uniform lengths, against twice for
    one run padded to the longest of all)."""
    order = sorted(range(len(bounds) - 1), key=lambda n: bounds[n + 1] - bounds[n])
    cuts = [len(order) * i // groups for i in range(groups + 1)]
    return [order[a:b] for a, b in zip(cuts, cuts[1:]) if b > a]


def _packed(q: Tensor, k: Tensor, v: Tensor, gain: Tensor, lam: Tensor, cfg: RuleConfig, backend: str,
            chunk_size: int, initial_state: FastWeightState | Tensor | None, output_final_state: bool,
            bounds: tuple[int, ...], cu_seqlens: Tensor | None = None) -> tuple[Tensor, FastWeightState | None]:
    """Packed sequences for the reference backends and the window rules' kernels: one call per sequence (exact,
    not fast); for outputs alone from fresh states, a few calls over the sequences laid one to a row, grouped by
    length and padded at their ends (padding after a sequence cannot reach its outputs)."""
    if initial_state is None and not output_final_state and len(bounds) > 2 and cu_seqlens is not None:
        lay = _rows_by_length(cu_seqlens, q.device)  # sequences of like lengths, one to a row: little padding
        sizes = [rows * longest for rows, longest in lay.shapes]

        def runs(t: Tensor) -> list[Tensor]:  # every run's rows of t at once: one gather, padding from a zero row
            flat = _Relay.apply(t[0], lay.gather, lay.back)
            return [part.unflatten(0, shape) for part, shape in zip(flat.split(sizes), lay.shapes)]

        parts = [_run(*ins, cfg, backend, chunk_size, None, False, None, None)[0]
                 for ins in zip(*(runs(t) for t in (q, k, v, gain, lam)))]
        return _Relay.apply(torch.cat([part.flatten(0, 1) for part in parts]), lay.back, lay.gather)[None], None
    outs, finals = [], []
    for n, (b, e) in enumerate(zip(bounds, bounds[1:])):
        init = None
        if initial_state is not None:
            init = (initial_state[n:n + 1] if isinstance(initial_state, Tensor)
                    else FastWeightState(*(t[n:n + 1] for t in initial_state)))
        o, fin = _run(*(t[:, b:e] for t in (q, k, v, gain, lam)), cfg, backend, chunk_size, init, True, None,
                      None)
        outs.append(o)
        finals.append(fin)
    final = FastWeightState(*(torch.cat(parts, dim=0) for parts in zip(*finals)))
    return torch.cat(outs, dim=1), (final if output_final_state else None)


@autocast_off
def fast_weight_step(
    state: FastWeightState | None, q_t: Tensor, k_t: Tensor, v_t: Tensor, beta_t: Tensor | None = None,
    lam_t: Tensor | None = None, *, rule: str, eta_t: Tensor | None = None, window: int = 4, eps: float = 1e-6,
    decay_floor: float = 1e-3, scale_coupled_ridge: bool = False, alignment: str = "shifted", timing: str = "raw",
) -> tuple[Tensor, FastWeightState]:
    """Advance one token in O(1) for generation. q_t, k_t ``[B, H, Dk]``; v_t ``[B, H, Dv]``;
    beta_t ``[B, H]`` (``[B, H, Dv]`` for 2/2a) or, in its place, the step size eta_t; lam_t ``[B, H]``.
    ``state=None`` starts a fresh sequence. Returns (o_t ``[B, H, Dv]``, the new state): the recurrent oracle
    over a sequence of one token, so equal to ``fast_weight_rule`` over the same tokens."""
    cfg, gain_t = _config(rule, window, eps, decay_floor, scale_coupled_ridge, alignment, timing, beta_t, eta_t)
    # one token as a sequence of T = 1, so the sequence checks apply
    q, k, v, gain, lam = (t.unsqueeze(1) if isinstance(t, Tensor) else t for t in (q_t, k_t, v_t, gain_t, lam_t))
    check_inputs(q, k, v, gain, lam, cfg, validate=False)
    dtype = compute_dtype(q.dtype)
    st, fresh = start_state(q, v, state, dtype, span=cfg.span)
    if cfg.per_channel and gain.dim() == 3:
        gain = gain[..., None].expand(*gain.shape, v.shape[-1])
    q, k, v, gain, lam = (t.to(dtype) for t in (q, k, v, gain, lam))
    o, new = dispatch.run("recurrent", q, k, v, gain, lam, cfg, st, fresh, chunk_size=1)
    return o[:, 0].to(q_t.dtype), new
