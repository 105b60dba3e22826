"""``backend="triton"`` for the window rules: falcon-3 on its own chunk kernels, falcon-3a as one delayed decayed
linear attention and a band.

falcon-3 (``triton_falcon3``): ``prepare`` (μ_t, η, γ, the window tail) and the gather of each token's W window
slots into rows stay PyTorch in float32, differentiated by autograd through to k, β, λ and the state; the chunked
recurrence, forward and backward, is Triton (``falcon_lab/kernels/window/triton_falcon3*.py``): the block-strict UT transform
per chunk of slot rows, the state pass, the reads at each token, and their backward (dq, dX, dV, da, d log γ, dS_0).

falcon-3a writes the mean outer product of its window of W pairs, with one step and one carry per token:

    S_t = γ_t S_{t−1} + a_t Σ_{j<W} x_{t−j} y_{t−j}ᵀ,    a_t = η_t / B_t,

(x, y the pairs, zero where a slot holds no pair; B_t the pairs in the window). Collected by pair, S_t is
Γ(0, t) S_0 + Σ_u c(u, t) x_u y_uᵀ, with Γ(s, t) = Π_{s<r≤t} γ_r and c(u, t) = Σ_{s=u}^{min(u+W−1, t)} Γ(s, t) a_s
over the tokens s whose window holds pair u. Once the window has passed u (t ≥ u + W − 1) the coefficient
factors, c(u, t) = Γ(u + W − 1, t) A_u with A_u = c(u, u + W − 1): pair u acts as if written once, at token
u + W − 1, with the gain A_u, and carried by γ from there. So

    S_t = S'_t + Σ_{d=0}^{W−2} c(t − d, t) x_{t−d} y_{t−d}ᵀ,    S'_t = γ_t S'_{t−1} + A_{t−W+1} x_{t−W+1} y_{t−W+1}ᵀ,

S' a decayed linear attention over the pairs delayed by W − 1 (``decayed_attention``: the fused falcon-1a kernels
with η = A and log γ given as they are), and the rest a band of the W − 1 pairs still inside the window, read by
one Triton kernel each way (``falcon_lab/kernels/window/triton_band.py``):
o_t = S'_tᵀ q_t + Σ_d c(t − d, t) (x_{t−d}·q_t) y_{t−d} (for RBW the same at t − 1). The partial sums
c_d(t) = c(t − d, t) follow from c_0(t) = a_t and c_d(t) = c_{d−1}(t) + Γ(t − d, t) a_{t−d}, with A at d = W − 1;
pairs in front of the sequence are the state's window tail (their earlier writes are already in S_0). One pass of
the kernels and O(T·W·D) besides, where running each lag as its own falcon-1a recurrence costs W passes.
The coefficients and ``prepare`` are PyTorch in float32, differentiated by autograd through to k, β, λ.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from falcon_lab.kernels.common import packed
from falcon_lab.kernels.common.checks import env_setting, setting
from falcon_lab.kernels.common.config import RuleConfig
from falcon_lab.kernels.common.prepare import final_state, prepare, window_gram, windows
from falcon_lab.kernels.common.recurrent import step_size_and_carry
from falcon_lab.kernels.common.state import FastWeightState
from falcon_lab.kernels.inner_product.fused import (decayed_attention, decayed_backward, decayed_forward,
                                                    decayed_plan)
from falcon_lab.kernels.window.eigen import top_eigenvalue
from falcon_lab.kernels.window.triton_band import band_backward, band_forward, band_read
from falcon_lab.kernels.window.triton_falcon3_launch import Falcon3Chunks, geometry


def _late(t: Tensor, d: int) -> Tensor:
    """``t`` ``[B, T, ...]`` d tokens later along time: entry t holds t − d, zero (False) in front."""
    d = min(d, t.shape[1])
    if not d:
        return t
    return torch.cat([t.new_zeros(t.shape[0], d, *t.shape[2:]), t[:, : t.shape[1] - d]], dim=1)


def window_coefficients(a: Tensor, log_gamma: Tensor, W: int) -> list[Tensor]:
    """``[c_0, …, c_{W−1}]``, each ``[B, T, H]``: c_d(t) = Σ_{s=t−d}^{t} Γ(s, t) a_s over the sequence's tokens s."""
    coef = [a]
    span = torch.zeros_like(log_gamma)  # log Γ(t − d, t)
    for d in range(1, W):
        span = span + _late(log_gamma, d - 1)
        coef.append(coef[-1] + torch.exp(span) * _late(a, d))
    return coef


def triton_falcon3a(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, cfg: RuleConfig,
                    state: FastWeightState, fresh: bool, chunk_size: int = 64,
                    cu_seqlens: Tensor | None = None,
                    sample_id: Tensor | None = None) -> tuple[Tensor, FastWeightState]:
    """falcon-3a over ``[B, T, H, D]`` inputs in their own dtype from a float32 ``state``; o in q's dtype. The form
    takes no ``cu_seqlens`` (one window tail a row): ``fast_weight_rule`` lays packed sequences one to a row.
    ``sample_id`` ``[B, T]``: the samples of each row apart, each fresh, outputs alone (``triton_falcon3a_packed``;
    the state is returned as it came)."""
    if not (cfg.windowed and not cfg.regression):
        raise ValueError(f"triton_falcon3a runs rule 'falcon-3a' only, got {cfg.rule!r}")
    if cu_seqlens is not None:
        raise ValueError("triton_falcon3a takes no cu_seqlens; fast_weight_rule lays packed sequences one to a row")
    if sample_id is not None:
        if not fresh:
            raise ValueError("triton_falcon3a runs rows of samples by sample_id from fresh states only")
        return triton_falcon3a_packed(q, k, v, beta, lam, cfg, chunk_size, sample_id=sample_id), state
    f32 = torch.float32
    # k and v as given: prepare's concatenations with the float32 state make the pairs float32 in one copy
    prep = prepare(k, v, beta.to(f32), lam.to(f32), cfg, state, fresh)
    last_key = k[:, -1:].to(f32)  # all final_state reads of k
    T, W = q.shape[1], cfg.span
    a = prep.eta / prep.n_pairs.clamp(min=1.0)[..., None]  # a_t = η_t / B_t, [B, T, H]
    log_gamma = torch.log(prep.gamma)
    coef = window_coefficients(a, log_gamma, W)
    # the delayed pairs: token t writes pair t − W + 1, position t of the extended arrays
    o, S = decayed_attention(q, prep.x_ext[:, :T].to(q.dtype), prep.y_ext[:, :T].to(q.dtype), coef[W - 1],
                             log_gamma, state.S, raw=cfg.timing == "raw", chunk_size=chunk_size)
    if W == 1:
        return o, final_state(S, last_key, prep, cfg)
    lag = 0 if cfg.timing == "raw" else 1  # RBW reads S_{t−1}: the band of token t − 1
    # token t reads pair t − lag − d, position t − lag − d + W − 1 of the extended arrays, with c_d(t − lag)
    band = torch.stack([_late(coef[d], lag) for d in range(W - 1)], dim=-1)  # [B, T, H, W − 1]
    o = band_read(q, prep.x_ext, prep.y_ext, band, lag, plus=o)  # summed in float32, o in q's dtype
    for d in range(W - 1):  # the final state's band: pairs T − 1 − d, c_d(T − 1)
        S = S + torch.einsum("bh,bhk,bhv->bhkv", coef[d][:, -1], prep.x_ext[:, T + W - 2 - d],
                             prep.y_ext[:, T + W - 2 - d])
    return o, final_state(S, last_key, prep, cfg)


class PackedWindows(NamedTuple):
    """What falcon-3a's windows over packed sequences take from ``cu_seqlens`` alone, ``[1, T, 1]`` each: ``pair``
    whether token t writes a pair (shifted: not a sequence's first token), ``held[j]`` whether slot j of t's window
    holds a pair of t's own sequence, ``n_pairs`` their count B_t, ``inside[d]`` whether t − d lies in t's sequence
    (d < W; as float32, the factors the coefficients are cut by)."""

    pair: Tensor
    held: list[Tensor]
    n_pairs: Tensor
    inside: list[Tensor]


def _windows_at(place: Tensor, W: int, shifted: bool) -> PackedWindows:
    """``PackedWindows`` from ``place`` ``[B, T, 1]``, each token's place in its own sample (0 at its first)."""
    f32 = torch.float32
    pair = place > 0 if shifted else torch.ones_like(place, dtype=torch.bool)
    held = [((place >= j) & _late(pair, j)).to(f32) for j in range(W)]
    return PackedWindows(pair=pair, held=held, n_pairs=torch.stack(held).sum(0),
                         inside=[(place >= d).to(f32) for d in range(W)])


def packed_windows(bounds: Tensor, T: int, W: int, shifted: bool) -> PackedWindows:
    """``PackedWindows`` of the packed sequences ``bounds`` (int64 ``cu_seqlens`` on the inputs' device), made once
    per tensor for every layer of a step (``falcon_lab.kernels.common.packed.memo``), from device operations alone:
    no host read."""
    def make() -> PackedWindows:
        lengths = bounds[1:] - bounds[:-1]
        place = torch.arange(T, device=bounds.device) - torch.repeat_interleave(bounds[:-1], lengths, output_size=T)
        return _windows_at(place[None, :, None], W, shifted)  # [1, T, 1]: broadcast over heads

    return packed.memo(bounds, ("falcon-3a windows", T, W, shifted), make)


def sample_windows(sample_id: Tensor, W: int, shifted: bool, device: torch.device) -> PackedWindows:
    """``PackedWindows`` of rows of samples told apart by ``sample_id`` ``[B, T]`` (non-decreasing along each row),
    ``[B, T, 1]`` each, made once per tensor for every layer of a step, from device operations alone: a token's
    place in its sample is its distance from the last token at or before it that starts a new id."""
    def make() -> PackedWindows:
        sid = sample_id.to(device)
        at = torch.arange(sid.shape[1], device=device).expand_as(sid)
        starts = torch.ones_like(sid, dtype=torch.bool)
        starts[:, 1:] = sid[:, 1:] != sid[:, :-1]
        place = at - torch.where(starts, at, torch.zeros_like(at)).cummax(dim=1).values
        return _windows_at(place[..., None], W, shifted)

    return packed.memo(sample_id, ("falcon-3a sample windows", W, shifted, str(device)), make)


def triton_falcon3a_packed(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, cfg: RuleConfig,
                           chunk_size: int, cu_seqlens: Tensor | None = None,
                           sample_id: Tensor | None = None) -> Tensor:
    """falcon-3a over fresh sequences, outputs alone (as a model trains), with no padding and no state: sequences
    packed along T of a batch of one (``cu_seqlens``), rows ``[B, T]`` of samples told apart by ``sample_id``, or
    (neither) each row one sequence. The same delayed pass on falcon-1a's kernels (their packed sequences, their
    rows of samples, or their rows) and the same band over each row, every window and every coefficient cut at its
    sequence's first token; the glue between them compiled on a GPU (``_glue_compiled``).

    With p_t the place of token t in its sequence, the window of token t holds the pairs t − j for j < W and
    j ≤ p_t (shifted: j < p_t, a sequence's first token having no pair); the coefficient c_d(t) of pair t − d is
    zero for d > p_t, so the delayed pair t − W + 1 of another sequence is written with a zero gain and the band
    reads no pair across a sequence's start (RBW: d + 1 > p_t). With ``sample_id`` or neither, every shape follows
    B and T alone and nothing is read on the host. Returns o in q's dtype."""
    B, T, H = q.shape[:3]
    W = cfg.span
    rows: dict[str, Tensor] = {}
    if cu_seqlens is not None:
        if sample_id is not None:
            raise ValueError("triton_falcon3a_packed takes cu_seqlens or sample_id, not both")
        # one int64 copy for every layer (the same tensor when it is one already): the facts below made once a step
        bounds = packed.memo(cu_seqlens, ("int64", str(q.device)), lambda: cu_seqlens.to(q.device).long())
        win = packed_windows(bounds, T, W, cfg.shifted)
        rows["cu_seqlens"] = bounds
        B = bounds.numel() - 1  # the state's rows: one a sequence
    elif sample_id is not None:
        win = sample_windows(sample_id, W, cfg.shifted, q.device)
        rows["sample_id"] = sample_id
    else:
        win = _row_windows(T, W, cfg.shifted, q.device, torch.is_inference_mode_enabled())
    glue = _glue_compiled() if q.is_cuda else _packed_glue
    x, gain, log_gamma, band = glue(q, k, beta, lam, win.pair, win.held, win.n_pairs, win.inside, cfg)
    S0 = q.new_zeros(B, H, q.shape[3], v.shape[-1], dtype=torch.float32)
    v = v.to(q.dtype)
    raw, lag = cfg.timing == "raw", 0 if cfg.timing == "raw" else 1
    # token t writes pair t − W + 1: the kernels read the pairs W − 1 tokens back where they lie
    plan = None if W == 1 else decayed_plan(q, x, v, gain, log_gamma, S0, raw, chunk_size, rows.get("cu_seqlens"),
                                            rows.get("sample_id"), W - 1)
    if plan is not None:  # both passes as one op (each row fresh: no pair in front of it)
        return _DelayedBand.apply(q.contiguous(), x.contiguous(), v.contiguous(), gain.contiguous(),
                                  log_gamma.contiguous(), S0, band.to(torch.float32).contiguous(), lag, plan)
    o, _ = decayed_attention(q, x, v, gain, log_gamma, S0, raw=raw, chunk_size=chunk_size, delay=W - 1, **rows)
    return o if W == 1 else band_read(q, x, v, band, lag, plus=o)


class _DelayedBand(torch.autograd.Function):
    """falcon-3a's two passes over the same q, x, v as one op: the delayed decayed attention, then the band adding
    its reads to the delayed output. Backward the band's kernel writes its dq, dx, dv first and the delayed pass's
    kernels add theirs into them (``decayed_backward(..., into=)``), where two ops' gradients were summed after
    (three bf16 additions a layer each step)."""

    @staticmethod
    def forward(ctx, q: Tensor, x: Tensor, v: Tensor, gain: Tensor, log_gamma: Tensor, S0: Tensor, band: Tensor,
                lag: int, plan) -> Tensor:
        o, _, kept = decayed_forward(plan, q, x, v, gain, log_gamma, S0)
        ctx.save_for_backward(band, *kept)
        ctx.lag, ctx.plan = lag, plan
        return band_forward(q, x, v, band, lag, plus=o)

    @staticmethod
    def backward(ctx, do: Tensor) -> tuple[Tensor | None, ...]:
        band, *kept = ctx.saved_tensors
        q, x, v = kept[:3]
        do = do.contiguous()
        dq, dx, dv, dband = band_backward(q, x, v, band, ctx.lag, do)
        dq, dx, dv, dgain, dlog_gamma, _ = decayed_backward(ctx.plan, tuple(kept), do, None, into=(dq, dx, dv))
        return dq, dx, dv, dgain, dlog_gamma, None, dband, None, None


@functools.lru_cache(maxsize=16)
def _row_windows(T: int, W: int, shifted: bool, device: torch.device, inference: bool) -> PackedWindows:
    """``PackedWindows`` of rows that are each one sequence, ``[1, T, 1]`` each (a token's place is its index), made
    once per length (apart under inference mode, whose tensors autograd cannot save)."""
    return _windows_at(torch.arange(T, device=device)[None, :, None], W, shifted)


def triton_falcon3(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, cfg: RuleConfig,
                   state: FastWeightState, fresh: bool, chunk_size: int = 64,
                   cu_seqlens: Tensor | None = None,
                   sample_id: Tensor | None = None) -> tuple[Tensor, FastWeightState]:
    """falcon-3 over ``[B, T, H, D]`` inputs in their own dtype from a float32 ``state``; o in q's dtype. The
    kernels' chunk holds min(chunk_size · WP, 64) slot rows (WP: the window padded to a power of two), so
    64 / WP tokens at the default. The form takes no ``cu_seqlens`` (one window tail a row): ``fast_weight_rule``
    lays packed sequences one to a row. ``sample_id`` ``[B, T]``: the samples of each row apart, each fresh, outputs
    alone (``triton_falcon3_samples``; the state is returned as it came)."""
    if not (cfg.windowed and cfg.regression):
        raise ValueError(f"triton_falcon3 runs rule 'falcon-3' only, got {cfg.rule!r}")
    if cu_seqlens is not None:
        raise ValueError("triton_falcon3 takes no cu_seqlens; fast_weight_rule lays packed sequences one to a row")
    if sample_id is not None:
        if not fresh:
            raise ValueError("triton_falcon3 runs rows of samples by sample_id from fresh states only")
        return triton_falcon3_samples(q, k, v, beta, lam, cfg, chunk_size, sample_id), state
    f32 = torch.float32
    prep = prepare(k, v, beta.to(f32), lam.to(f32), cfg, state, fresh, top_eigenvalue)  # pairs float32 (above)
    B, T, H = q.shape[:3]
    geo = geometry(cfg.span, chunk_size)
    pad = (0, 0, 0, 0, 0, geo["WP"] - cfg.span)  # slots past the window hold x = v = 0: they write nothing
    X, V = (F.pad(windows(t, cfg.span), pad).reshape(B, T * geo["WP"], H, -1).to(q.dtype)
            for t in (prep.x_ext, prep.y_ext))
    a = prep.eta / prep.n_pairs.clamp(min=1.0)[..., None]  # a_t = η_t / B_t, [B, T, H]
    o, S = Falcon3Chunks.apply(q, X, V, a, torch.log(prep.gamma), state.S.float(), cfg.timing == "rbw", geo)
    return o, final_state(S, k[:, -1:].to(f32), prep, cfg)  # final_state reads the last key alone


def triton_falcon3_samples(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, cfg: RuleConfig,
                           chunk_size: int, sample_id: Tensor) -> Tensor:
    """falcon-3 over rows ``[B, T]`` of fresh samples told apart by ``sample_id``, outputs alone, with no host read
    and shapes that follow B and T alone: each token's window slots hold the pairs of its own sample
    (``sample_windows``), μ_t is the top eigenvalue of their Gram, and the chunk kernels restart at each sample
    (``SAMPLES``). The glue around the eigenvalue runs eagerly or, on a GPU with ``GLUE = "compiled"``, compiled
    for the rows' shape. Returns o in q's dtype."""
    W = cfg.span
    win = sample_windows(sample_id, W, cfg.shifted, q.device)
    geo = geometry(W, chunk_size)
    slots, gates = _samples_glue_compiled() if q.is_cuda and GLUE == "compiled" else (_sample_slots, _sample_gates)
    gram, X, V = slots(q, k, v, win.pair, win.held, cfg, geo["WP"])
    a, log_gamma = gates(top_eigenvalue(gram), win.n_pairs, beta, lam, cfg)
    S0 = q.new_zeros(q.shape[0], q.shape[2], q.shape[3], v.shape[-1], dtype=torch.float32)
    sid = packed.ids_int32(sample_id, q.device)
    return Falcon3Chunks.apply(q, X, V, a, log_gamma, S0, cfg.timing == "rbw", geo, sid)[0]


def _sample_slots(q: Tensor, k: Tensor, v: Tensor, pair: Tensor, held: list[Tensor], cfg: RuleConfig,
                  WP: int) -> tuple[Tensor, Tensor, Tensor]:
    """The window Gram of each token ``[B, T, H, W, W]`` in float32 (``window_gram``) and the slot rows X, V
    ``[B, T·WP, H, D]`` in q's dtype (``windows``), over the pairs of t's own sample: slot i of token t holds pair
    t − W + 1 + i where that is of t's sample (``held``), else 0."""
    B, T, H = q.shape[:3]
    W = cfg.span
    x = k.to(torch.float32)
    if cfg.shifted:  # x_t = k_{t−1} within a sample; its first token writes no pair
        x = F.pad(x, (0, 0, 0, 0, 1, 0))[:, :T] * pair[..., None]
    front = (0, 0, 0, 0, W - 1, 0)  # W − 1 empty slots before the row: each window as the extended arrays take it
    mine = torch.stack(held[::-1], dim=-1)  # [B, T, 1, W]: slot i holds pair t − W + 1 + i, held[W − 1 − i]
    gram = window_gram(F.pad(x, front), W) * mine[..., :, None] * mine[..., None, :]
    mine_q = mine.movedim(-1, 2)[..., None].to(q.dtype)  # [B, T, W, 1, 1]

    def slots(t: Tensor) -> Tensor:
        held_rows = windows(F.pad(t.to(q.dtype), front), W) * mine_q  # [B, T, W, H, D]
        return F.pad(held_rows, (0, 0, 0, 0, 0, WP - W)).reshape(B, T * WP, H, t.shape[-1])

    return gram, slots(x), slots(v)


def _sample_gates(top: Tensor, n_pairs: Tensor, beta: Tensor, lam: Tensor, cfg: RuleConfig) -> tuple[Tensor, Tensor]:
    """a = η / B_t and log γ ``[B, T, H]`` in float32 from the windows' top eigenvalues (μ_t = top / B_t)."""
    f32 = torch.float32
    n = n_pairs.clamp(min=1.0)
    eta, gamma = step_size_and_carry(cfg, beta.to(f32), lam.to(f32), top / n, n_pairs)
    return eta / n, torch.log(gamma)


GLUES = ("eager", "compiled")


def glue(text: str) -> str:
    """``text`` when it names one of ``GLUES`` (SettingError naming them otherwise)."""
    return setting("falcon-3's glue by sample id", text, GLUES)


# falcon-3's glue by sample id on a GPU, around its eigenvalue kernel: ``eager`` (the default until a bench says
# otherwise) or ``compiled`` for the rows' shape; ``LAB_FALCON3_GLUE`` or ``--kernels falcon3-glue=``
GLUE = env_setting("LAB_FALCON3_GLUE", "eager", glue)


@functools.cache
def _samples_glue_compiled() -> tuple[Callable[..., tuple[Tensor, ...]], Callable[..., tuple[Tensor, ...]]]:
    """``_sample_slots`` and ``_sample_gates`` compiled: the rows by sample id keep one shape a run, so each is
    compiled for it (``dynamic=False``; falcon-3's glue over packed rows, with every size symbolic, was slower:
    docs/findings.md). Made at first use."""
    return torch.compile(_sample_slots, dynamic=False), torch.compile(_sample_gates, dynamic=False)


def _packed_glue(q: Tensor, k: Tensor, beta: Tensor, lam: Tensor, pair: Tensor, held: list[Tensor],
                 n_pairs: Tensor, inside: list[Tensor], cfg: RuleConfig) -> tuple[Tensor, ...]:
    """What ``triton_falcon3a_packed`` gives its two kernels, elementwise over [1, T, H(, D)] in float32: the pairs
    x in q's dtype (the delayed pass reads them and v W − 1 tokens back itself), the delayed pairs' gain c_{W−1},
    log γ and the band's coefficients ``[1, T, H, W − 1]`` (None for W = 1)."""
    f32 = torch.float32
    T, W = q.shape[1], cfg.span
    x = k.to(f32)
    if cfg.shifted:  # x_t = k_{t−1} within a sequence; its first token writes no pair
        x = F.pad(x, (0, 0, 0, 0, 1, 0))[:, :T] * pair[..., None]
    sq = (x * x).sum(-1)  # [1, T, H]
    energy = sum(_late(sq, j) * h for j, h in enumerate(held)) / n_pairs.clamp(min=1.0)
    eta, gamma = step_size_and_carry(cfg, beta.to(f32), lam.to(f32), energy, n_pairs)
    a = eta / n_pairs.clamp(min=1.0)
    log_gamma = torch.log(gamma)
    coef = [c * cut for c, cut in zip(window_coefficients(a, log_gamma, W), inside)]
    lag = 0 if cfg.timing == "raw" else 1
    band = (torch.stack([_late(coef[d], lag) * inside[d + lag] for d in range(W - 1)], dim=-1) if W > 1
            else None)
    return x.to(q.dtype), coef[W - 1], log_gamma, band  # the pairs in q's dtype, as both passes read them


@functools.cache
def _glue_compiled() -> Callable[..., tuple[Tensor, ...]]:
    """On a GPU the glue's ~40 elementwise ops a layer each way run as a few fused kernels (dynamic shapes: one
    compilation for every length of the packed row); the kernels around it stay as they are. Made at first use:
    importing the compiler costs every process that never runs falcon-3a on a GPU."""
    return torch.compile(_packed_glue, dynamic=True)
