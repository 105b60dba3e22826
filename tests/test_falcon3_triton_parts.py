"""A falcon-3 layer with its Triton parts (the top eigenvalue of the window Grams, the inverse of the window
systems) against the same layer with eigvalsh and solve_triangular: outputs and every gradient.

On a CPU both kernels run under Triton's interpreter, taken by forcing the two dispatch predicates; on a GPU
the test also checks that the layer takes them by itself.
"""

from __future__ import annotations

import pytest
import torch

from falcon_lab.kernels.window import eigen, solve
from falcon_lab.mixers import build_mixer

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def forward_backward(layer: torch.nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    layer.zero_grad()
    x = x.detach().clone().requires_grad_(True)
    y = layer(x)
    (y * torch.linspace(-1, 1, y.shape[-1], device=y.device)).square().mean().backward()
    return [y.detach(), x.grad] + [p.grad for p in layer.parameters()]


@pytest.mark.parametrize("parts", ["eigen", "solve", "both"])
def test_a_falcon3_layer_with_the_triton_parts_matches_the_reference(parts: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    layer = build_mixer("falcon-3", 32, 2).to(DEVICE)
    x = torch.randn(2, 40, 32, device=DEVICE)  # 40 tokens: chunks of 16, the last one short
    if DEVICE == "cuda":  # left to itself, the layer takes both kernels on a GPU
        seen = []
        for module, name in ((eigen, "takes_triton_eigen"), (solve, "takes_triton_solve")):
            real = getattr(module, name)
            monkeypatch.setattr(module, name, lambda *t, real=real: seen.append(real(*t)) or seen[-1])
        forward_backward(layer, x)
        assert len(seen) >= 2 and all(seen)
    monkeypatch.setattr(eigen, "takes_triton_eigen", lambda gram: False)
    monkeypatch.setattr(solve, "takes_triton_solve", lambda system, rhs: False)
    reference = forward_backward(layer, x)
    if parts in ("eigen", "both"):
        monkeypatch.setattr(eigen, "takes_triton_eigen", lambda gram: True)
    if parts in ("solve", "both"):
        monkeypatch.setattr(solve, "takes_triton_solve", lambda system, rhs: True)
    out = forward_backward(layer, x)
    assert len(out) == len(reference)
    for got, ref in zip(out, reference):  # relative to each tensor's norm: rounding is ~1e-7, a wrong part O(1)
        err = ((got - ref).norm() / ref.norm().clamp_min(1e-30)).item()
        assert err < 1e-4, err
