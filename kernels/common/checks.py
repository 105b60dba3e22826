"""Input validation for the rule ops: every error names the argument and what is accepted."""

from __future__ import annotations

import torch
from torch import Tensor

from kernels.common.config import RuleConfig
from kernels.common.state import FastWeightState, fresh_state


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
    """Shapes and dtypes always; value ranges (β ∈ (0, 2), λ ≥ 0, finite) only when ``validate``."""
    B, T, H, Dk, Dv = check_qkv(q, k, v)
    if cfg.per_channel:
        if not isinstance(beta, Tensor) or tuple(beta.shape) not in ((B, T, H, Dv), (B, T, H)):
            got = tuple(beta.shape) if isinstance(beta, Tensor) else type(beta).__name__
            raise ValueError(f"beta has shape {got}; {cfg.rule} expects [B, T, H, Dv] = {(B, T, H, Dv)} "
                             f"(or [B, T, H], shared by all channels)")
    else:
        check_shape("beta", beta, (B, T, H), f"[B, T, H] for {cfg.rule}")
    check_shape("lam", lam, (B, T, H), "[B, T, H]")
    check_floating_on_one_device(q=q, k=k, v=v, beta=beta, lam=lam)
    if validate:
        for name, t in (("q", q), ("k", k), ("v", v), ("beta", beta), ("lam", lam)):
            if not torch.isfinite(t).all():
                raise ValueError(f"{name} holds NaN or inf values")
        if cfg.normalize and not ((beta > 0) & (beta < 2)).all():
            raise ValueError(f"beta must lie in (0, 2) (the NLMS gain); got values in "
                             f"[{beta.min().item():.4g}, {beta.max().item():.4g}]")
        if cfg.normalize is False and not (beta >= 0).all():
            raise ValueError("beta (used directly as the step size η when normalize=False) must be >= 0")
        if not (lam >= 0).all():
            raise ValueError(f"lam (the ridge λ) must be >= 0; got a minimum of {lam.min().item():.4g}")
