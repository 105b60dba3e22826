"""Input validation for the rule ops: every error names the argument and what is accepted."""

from __future__ import annotations

import torch
from torch import Tensor

from kernels.falcon.config import RuleConfig
from kernels.falcon.state import FastWeightState


def _shape(name: str, t: object, expected: tuple[int, ...], what: str) -> None:
    if not isinstance(t, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor {what}, got {type(t).__name__}")
    if tuple(t.shape) != expected:
        raise ValueError(f"{name} has shape {tuple(t.shape)}; expected {what} = {expected}")


def _floating(name: str, t: Tensor) -> None:
    if not t.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor (float16/bfloat16/float32/float64), "
                         f"got {t.dtype}")


def check_inputs(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, cfg: RuleConfig,
                 validate: bool) -> None:
    """Shapes and dtypes always; value ranges (β ∈ (0, 2), λ ≥ 0, finite) only when ``validate``."""
    if not isinstance(q, Tensor) or q.dim() != 4:
        got = tuple(q.shape) if isinstance(q, Tensor) else type(q).__name__
        raise ValueError(f"q must be a 4-D tensor [B, T, H, Dk], got {got}")
    B, T, H, Dk = q.shape
    if T < 1:
        raise ValueError("q has T = 0 tokens; the sequence axis (dim 1) must hold at least one token")
    _shape("k", k, (B, T, H, Dk), "[B, T, H, Dk] like q")
    if not isinstance(v, Tensor) or v.dim() != 4 or tuple(v.shape[:3]) != (B, T, H):
        got = tuple(v.shape) if isinstance(v, Tensor) else type(v).__name__
        raise ValueError(f"v has shape {got}; expected [B, T, H, Dv] with B, T, H = {(B, T, H)}")
    Dv = v.shape[-1]
    if cfg.per_channel:
        if not isinstance(beta, Tensor) or tuple(beta.shape) not in ((B, T, H, Dv), (B, T, H)):
            got = tuple(beta.shape) if isinstance(beta, Tensor) else type(beta).__name__
            raise ValueError(f"beta has shape {got}; {cfg.rule} expects [B, T, H, Dv] = {(B, T, H, Dv)} "
                             f"(or [B, T, H], shared by all channels)")
    else:
        _shape("beta", beta, (B, T, H), f"[B, T, H] for {cfg.rule}")
    _shape("lam", lam, (B, T, H), "[B, T, H]")
    for name, t in (("q", q), ("k", k), ("v", v), ("beta", beta), ("lam", lam)):
        _floating(name, t)
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"q, k, v must share one dtype, got q {q.dtype}, k {k.dtype}, v {v.dtype}")
    devices = {t.device for t in (q, k, v, beta, lam)}
    if len(devices) > 1:
        raise ValueError(f"q, k, v, beta, lam must be on one device, got {sorted(map(str, devices))}")
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


def check_state(state: FastWeightState, q: Tensor, v: Tensor, cfg: RuleConfig, batch: int | None = None) -> None:
    """An ``initial_state`` must match the batch (or number of packed sequences), heads, dims and window."""
    B, _, H, Dk = q.shape
    B = B if batch is None else batch
    Dv = v.shape[-1]
    W = cfg.span
    expected = {
        "S": (B, H, Dk, Dv),
        "last_key": (B, H, Dk),
        "x_tail": (B, H, W - 1, Dk),
        "v_tail": (B, H, W - 1, Dv),
        "tail_mask": (B, W - 1),
    }
    for field, shape in expected.items():
        t = getattr(state, field)
        if not isinstance(t, Tensor) or tuple(t.shape) != shape:
            got = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
            hint = " (was the state made with another window?)" if field in ("x_tail", "v_tail", "tail_mask") else ""
            raise ValueError(f"initial_state.{field} has shape {got}; expected {shape}{hint}")
