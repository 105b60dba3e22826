"""Validation at the ops' boundary: every option and tensor is checked here once, and every error names the
argument and what is accepted. The mixers check their options with these same functions."""

from __future__ import annotations

import numbers
import os
from collections.abc import Callable

import torch
from torch import Tensor

from falcon_lab.kernels.common import packed
from falcon_lab.kernels.common.config import (ALIGNMENTS, CHUNK_SIZES, FUSED_MAX_HEAD_DIM, FUSED_RULES, TIMINGS,
                                              RuleConfig)
from falcon_lab.kernels.common.state import FastWeightState, fresh_state


class SettingError(ValueError):
    """A process-wide kernel setting that is not one (an environment variable such as LAB_CONV_FORM, or `lab bench
    step --kernels`): bad input, which the command line reports in its one line, exiting 2 (``bad_input``)."""

    bad_input = True


def setting(what: str, text: str, accepted: tuple[str, ...]) -> str:
    """``text`` when it names one of ``accepted``; SettingError naming ``what`` and the choices otherwise."""
    if text not in accepted:
        raise SettingError(f"{what} must be one of {', '.join(accepted)}, got {text!r}")
    return text


def env_setting(variable: str, default: str, read: Callable[[str], str]) -> str:
    """The process's setting from the environment ``variable`` (``default`` without it), checked by ``read``; its
    SettingError names the variable."""
    try:
        return read(os.environ.get(variable, default))
    except SettingError as err:
        raise SettingError(f"{variable}: {err}") from None


def check_choice(name: str, value: object, accepted: tuple[str, ...]) -> None:
    """``value`` must be one of ``accepted``."""
    if value not in accepted:
        raise ValueError(f"{name}={value!r}; accepted: {', '.join(accepted)}")


def check_int(name: str, value: object, minimum: int) -> None:
    """``value`` must be an integer >= ``minimum`` (booleans are not integers here)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def check_real(name: str, value: object, low: float = float("-inf"), high: float = float("inf"), *,
               low_open: bool = False, high_open: bool = False, what: str = "") -> None:
    """``value`` must be a real number in [low, high] (open at either end when asked); ``what`` names it."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if ok:
        ok = (value > low if low_open else value >= low) and (value < high if high_open else value <= high)
    if not ok:
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        where = "" if (low, high) == (float("-inf"), float("inf")) else f" in {interval}"
        raise ValueError(f"{name}{what} must be a real number{where}, got {value!r}")


def check_rule_options(*, window: int, eps: float, decay_floor: float) -> None:
    """The numbers of a Falcon rule: a window B >= 1, ε >= 0 and a decay floor ε_γ in (0, 1)."""
    check_int("window", window, 1)
    check_real("eps", eps, 0.0)
    check_real("decay_floor", decay_floor, 0.0, 1.0, low_open=True, high_open=True, what=" (ε_γ)")


def check_sequence_options(*, alignment: str, timing: str, backend: str | None = None,
                           backends: tuple[str, ...] = (), chunk_size: int | None = None) -> None:
    """What every sequence op takes: an alignment and a timing; a backend among ``backends`` and a chunk size
    >= 1 where the op takes them."""
    check_choice("alignment", alignment, ALIGNMENTS)
    check_choice("timing", timing, TIMINGS)
    if backend is not None:
        check_choice("backend", backend, backends)
    if chunk_size is not None:
        check_int("chunk_size", chunk_size, 1)


def interpreting() -> bool:
    """True when Triton runs its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def fused_refusal(q: Tensor, v: Tensor, cfg: RuleConfig, chunk_size: int, packed: bool,
                  beta: Tensor | None = None, lam: Tensor | None = None) -> str | None:
    """Why ``backend="triton"`` cannot run these inputs, or None when it can: a rule with fused kernels, inputs
    (and gates, when given) in bf16/fp16/fp32, a chunk size of ``CHUNK_SIZES``, Dk and Dv up to 256, falcon-2a's
    decay floor, falcon-3's window up to ``FUSED_MAX_WINDOW``, CUDA tensors (or Triton's interpreter). Packed
    sequences (``packed``) are taken by every rule: falcon-3 and falcon-3a lay them one to a row
    (``falcon_lab.kernels.falcon.api``)."""
    spec = cfg.spec
    if spec.triton is None:
        return f"backend='triton' covers {', '.join(FUSED_RULES)}; for {cfg.rule} use backend='chunk'"
    fused_dtypes = (torch.bfloat16, torch.float16, torch.float32)
    if q.dtype not in fused_dtypes:
        return (f"backend='triton' takes q, k, v in bf16, fp16 or fp32; got {q.dtype} (use backend='recurrent' or "
                f"'chunk' for float64)")
    gains = ("beta", "g") if cfg.gated_delta else ("beta" if cfg.normalize else "eta", "lam")
    for name, t in zip(gains, (beta, lam)):
        if t is not None and t.dtype not in fused_dtypes:
            return f"backend='triton' takes {name} in bf16, fp16 or fp32; got {t.dtype}"
    if chunk_size not in CHUNK_SIZES:
        return f"chunk_size={chunk_size} for backend='triton'; accepted: {', '.join(map(str, CHUNK_SIZES))}"
    if max(q.shape[-1], v.shape[-1]) > FUSED_MAX_HEAD_DIM:
        return (f"backend='triton' takes Dk, Dv up to {FUSED_MAX_HEAD_DIM}; got Dk={q.shape[-1]}, "
                f"Dv={v.shape[-1]}")
    floor = spec.fused_min_decay_floor
    if floor is not None and cfg.decay_floor < floor:
        return (f"{cfg.rule} on backend='triton' needs decay_floor >= {floor} (its "
                f"16-token blocks factor the per-channel carry around their midpoint), got {cfg.decay_floor}; use "
                f"backend='chunk' for smaller floors")
    widest = spec.fused_max_window
    if widest is not None and cfg.window > widest:
        return (f"backend='triton' for {cfg.rule} takes a window up to {widest} (a chunk of its kernels "
                f"holds at most {widest} window slots), got window={cfg.window}; use backend='chunk'")
    if not (q.is_cuda or interpreting()):
        return "backend='triton' needs CUDA tensors (or TRITON_INTERPRET=1 for Triton's CPU interpreter)"
    return None


def check_cu_seqlens(cu_seqlens: Tensor, q: Tensor) -> tuple[int, ...]:
    """Offsets of packed sequences: 1-D integers, 0 first, T last, strictly increasing; batch of one."""
    if not isinstance(cu_seqlens, Tensor) or cu_seqlens.dim() != 1 or cu_seqlens.is_floating_point() \
            or cu_seqlens.numel() < 2:
        raise ValueError("cu_seqlens must be a 1-D integer tensor of N + 1 offsets [0, ..., T]")
    if q.shape[0] != 1:
        raise ValueError(f"cu_seqlens packs sequences along T of a batch of one; q has batch {q.shape[0]}")
    host = packed.on_host(cu_seqlens)  # read from the device once per tensor: every layer checks the same one
    if host[0] != 0 or host[-1] != q.shape[1] or not (host[1:] > host[:-1]).all():
        raise ValueError(f"cu_seqlens must rise strictly from 0 to T = {q.shape[1]}, got {host.tolist()}")
    return packed.offsets(cu_seqlens)


def check_sample_ids(sample_id: object, B: int, T: int) -> None:
    """ValueError unless ``sample_id`` is an integer tensor ``[B, T]`` (non-decreasing along each row, not checked:
    that would read the device)."""
    if not isinstance(sample_id, Tensor) or sample_id.is_floating_point() or sample_id.is_complex() \
            or sample_id.dtype == torch.bool or tuple(sample_id.shape) != (B, T):
        got = (f"{sample_id.dtype} {tuple(sample_id.shape)}" if isinstance(sample_id, Tensor)
               else type(sample_id).__name__)
        raise ValueError(f"sample_id must be integers [B, T] = {(B, T)} (each token's sample within its row), "
                         f"got {got}")


def check_sample_id(sample_id: object, q: Tensor, cu_seqlens: Tensor | None) -> None:
    """Rows of samples told apart by ``sample_id``: ``[B, T]`` integers on q's device (``check_sample_ids``), not
    with ``cu_seqlens``."""
    if cu_seqlens is not None:
        raise ValueError("pass cu_seqlens (sequences packed along T of a batch of one) or sample_id (rows of "
                         "samples told apart by their ids), not both")
    check_sample_ids(sample_id, *q.shape[:2])
    if sample_id.device != q.device:
        raise ValueError(f"sample_id is on {sample_id.device}, q on {q.device}; pass them on one device")


def check_shape(name: str, t: object, expected: tuple[int, ...], what: str) -> None:
    """``t`` must be a tensor of exactly ``expected`` shape (``what`` says it in words)."""
    if not isinstance(t, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor {what}, got {type(t).__name__}")
    if tuple(t.shape) != expected:
        raise ValueError(f"{name} has shape {tuple(t.shape)}; expected {what} = {expected}")


def check_qkv(q: Tensor, k: Tensor, v: Tensor) -> tuple[int, int, int, int, int]:
    """q, k ``[B, T, H, Dk]`` and v ``[B, T, H, Dv]``, floating, one dtype, T ≥ 1. Returns (B, T, H, Dk, Dv)."""
    if not isinstance(q, Tensor) or q.dim() != 4:
        got = tuple(q.shape) if isinstance(q, Tensor) else type(q).__name__
        raise ValueError(f"q must be a 4-D tensor [B, T, H, Dk], got {got}")
    B, T, H, Dk = q.shape
    if T < 1:
        raise ValueError("q has T = 0 tokens; the sequence axis (dim 1) must hold at least one token")
    check_shape("k", k, (B, T, H, Dk), "[B, T, H, Dk] like q")
    if not isinstance(v, Tensor) or v.dim() != 4 or tuple(v.shape[:3]) != (B, T, H):
        got = tuple(v.shape) if isinstance(v, Tensor) else type(v).__name__
        raise ValueError(f"v has shape {got}; expected [B, T, H, Dv] with B, T, H = {(B, T, H)}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not t.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor (float16/bfloat16/float32/float64), "
                             f"got {t.dtype}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"q, k, v must share one dtype, got q {q.dtype}, k {k.dtype}, v {v.dtype}")
    return B, T, H, Dk, v.shape[-1]


def check_floating_on_one_device(**tensors: Tensor) -> None:
    """Every tensor floating-point, all on one device."""
    for name, t in tensors.items():
        if not t.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor (float16/bfloat16/float32/float64), "
                             f"got {t.dtype}")
    devices = {t.device for t in tensors.values()}
    if len(devices) > 1:
        raise ValueError(f"{', '.join(tensors)} must be on one device, got {sorted(map(str, devices))}")


def start_state(q: Tensor, v: Tensor, initial_state: FastWeightState | Tensor | None, dtype: torch.dtype,
                span: int = 1, batch: int | None = None) -> tuple[FastWeightState, bool]:
    """The state an op starts from, in ``dtype``, and whether the sequence is fresh: None or a bare S
    start fresh; a FastWeightState continues. ``span``: the window W (its tail holds W − 1 pairs);
    ``batch``: rows of the state when it differs from q's batch (packed sequences)."""
    B, _, H, Dk = q.shape
    B = B if batch is None else batch
    Dv = v.shape[-1]
    if initial_state is None or isinstance(initial_state, Tensor):
        if isinstance(initial_state, Tensor):
            check_shape("initial_state", initial_state, (B, H, Dk, Dv),
                        "S [B, H, Dk, Dv] (or a FastWeightState)")
            if not initial_state.is_floating_point():
                raise ValueError(f"initial_state must be a floating-point tensor, got {initial_state.dtype}")
        return fresh_state(B, H, Dk, Dv, span, dtype, q.device, initial_state), True
    if not isinstance(initial_state, FastWeightState):
        raise ValueError(f"initial_state must be None, a tensor S or a FastWeightState, "
                         f"got {type(initial_state).__name__}")
    expected = {"S": (B, H, Dk, Dv), "last_key": (B, H, Dk), "x_tail": (B, H, span - 1, Dk),
                "v_tail": (B, H, span - 1, Dv), "tail_mask": (B, span - 1)}
    for field, shape in expected.items():
        t = getattr(initial_state, field)
        if not isinstance(t, Tensor) or tuple(t.shape) != shape:
            got = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
            hint = (f" (a window of {span} keeps a tail of {span - 1} pairs: was the state made with another "
                    f"window or op?)" if field in ("x_tail", "v_tail", "tail_mask") else "")
            raise ValueError(f"initial_state.{field} has shape {got}; expected {shape}{hint}")
    st = initial_state
    return FastWeightState(st.S.to(dtype), st.last_key.to(dtype), st.x_tail.to(dtype), st.v_tail.to(dtype),
                           st.tail_mask.bool()), False


def check_inputs(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, cfg: RuleConfig,
                 validate: bool) -> None:
    """Shapes and dtypes always; value ranges (β ∈ (0, 2), or η >= 0 without normalisation; λ ≥ 0; finite)
    only when ``validate``. ``beta`` holds η itself when ``cfg.normalize`` is False."""
    name = "beta" if cfg.normalize else "eta"
    B, T, H, Dk, Dv = check_qkv(q, k, v)
    if cfg.per_channel:
        if not isinstance(beta, Tensor) or tuple(beta.shape) not in ((B, T, H, Dv), (B, T, H)):
            got = tuple(beta.shape) if isinstance(beta, Tensor) else type(beta).__name__
            raise ValueError(f"{name} has shape {got}; {cfg.rule} expects [B, T, H, Dv] = {(B, T, H, Dv)} "
                             f"(or [B, T, H], shared by all channels)")
    else:
        check_shape(name, beta, (B, T, H), f"[B, T, H] for {cfg.rule}")
    check_shape("lam", lam, (B, T, H), "[B, T, H]")
    check_floating_on_one_device(q=q, k=k, v=v, **{name: beta}, lam=lam)
    if validate:
        for label, t in (("q", q), ("k", k), ("v", v), (name, beta), ("lam", lam)):
            if not torch.isfinite(t).all():
                raise ValueError(f"{label} holds NaN or inf values")
        if cfg.normalize and not ((beta > 0) & (beta < 2)).all():
            raise ValueError(f"beta must lie in (0, 2) (the NLMS gain); got values in "
                             f"[{beta.min().item():.4g}, {beta.max().item():.4g}]")
        if not cfg.normalize and not (beta >= 0).all():
            raise ValueError(f"eta (the step size η) must be >= 0; got a minimum of {beta.min().item():.4g}")
        if not (lam >= 0).all():
            raise ValueError(f"lam (the ridge λ) must be >= 0; got a minimum of {lam.min().item():.4g}")
