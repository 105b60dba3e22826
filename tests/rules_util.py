"""Random inputs and error measures shared by the tests of the rules."""

from __future__ import annotations

import torch
from torch import Tensor

PER_CHANNEL = ("falcon-2", "falcon-2a")


def rule_inputs(rule: str, B: int = 2, T: int = 7, H: int = 2, Dk: int = 4, Dv: int = 3, *, seed: int = 0,
                dtype: torch.dtype = torch.float64, beta_range: tuple[float, float] = (0.05, 1.95),
                lam_scale: float = 1.0, requires_grad: bool = False) -> dict[str, Tensor]:
    """Fresh random q, k, v, beta (per channel for 2/2a), lam for one rule."""
    g = torch.Generator().manual_seed(seed)
    rand = lambda *s: torch.randn(*s, generator=g, dtype=dtype)  # noqa: E731
    lo, hi = beta_range
    beta_shape = (B, T, H, Dv) if rule in PER_CHANNEL else (B, T, H)
    inputs = {
        "q": rand(B, T, H, Dk),
        "k": rand(B, T, H, Dk),
        "v": rand(B, T, H, Dv),
        "beta": lo + (hi - lo) * torch.rand(*beta_shape, generator=g, dtype=dtype),
        "lam": lam_scale * torch.rand(B, T, H, generator=g, dtype=dtype),
    }
    if requires_grad:
        for t in inputs.values():
            t.requires_grad_(True)
    return inputs


def rel_err(out: Tensor, ref: Tensor) -> float:
    """‖out − ref‖ / ‖ref‖ (absolute when ref is 0)."""
    out, ref = out.double(), ref.double()
    denom = ref.norm().item()
    return (out - ref).norm().item() / (denom if denom > 0 else 1.0)


def slice_time(inputs: dict[str, Tensor], start: int, stop: int) -> dict[str, Tensor]:
    return {name: t[:, start:stop] for name, t in inputs.items()}


def gain(t: Tensor, normalize: bool = True) -> dict[str, Tensor]:
    """The op's keyword for the tensor that drives the step: ``beta`` (the gain, normalised by the write
    energy) or, without normalisation, ``eta`` (the step size itself, the ctxη reading)."""
    return {"beta": t} if normalize else {"eta": t}
