"""The Triton inverse of Falcon-3's unit lower-triangular window systems (kernels/falcon/triton_tril_inverse.py)
against torch.linalg.solve_triangular: values and gradients.

On a CPU the kernel runs under Triton's interpreter (tests/conftest.py); the last test needs a GPU and checks
that a falcon-3 layer takes it there and computes what solve_triangular gives.
"""

from __future__ import annotations

import pytest
import torch

from kernels.falcon.triton_tril_inverse import unit_lower_inverse, unit_lower_solve

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def systems(*shape: int, scale: float = 0.25, seed: int = 0) -> torch.Tensor:
    """Random systems with entries on and above the diagonal too (the solve must ignore them)."""
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=gen) * scale).to(DEVICE)


@pytest.mark.parametrize("n", [64, 48, 17, 1])
def test_the_inverse_of_the_unit_lower_part(n: int) -> None:
    A = systems(6, n, n, seed=n)
    T = unit_lower_inverse(A)
    L = torch.eye(n, device=DEVICE) + A.tril(-1)
    assert torch.allclose(T @ L, torch.eye(n, device=DEVICE).expand(6, n, n), atol=1e-5)
    assert T.triu(1).eq(0).all() and T.diagonal(dim1=-2, dim2=-1).eq(1).all()


@pytest.mark.parametrize("n", [64, 32])
def test_solve_values_and_gradients_are_solve_triangular_s(n: int) -> None:
    A = systems(2, 3, n, n, seed=1).requires_grad_(True)
    R = systems(2, 3, n, 40, scale=1.0, seed=2).requires_grad_(True)
    A_ref, R_ref = (t.detach().clone().requires_grad_(True) for t in (A, R))
    dz = systems(2, 3, n, 40, scale=1.0, seed=3)
    Z = unit_lower_solve(A, R)
    (Z * dz).sum().backward()
    Z_ref = torch.linalg.solve_triangular(A_ref, R_ref, upper=False, unitriangular=True)
    (Z_ref * dz).sum().backward()
    assert torch.allclose(Z, Z_ref, atol=2e-5)
    assert torch.allclose(R.grad, R_ref.grad, atol=2e-5)
    assert torch.allclose(A.grad, A_ref.grad, atol=1e-4)
    assert A.grad.triu().eq(0).all()  # only the strictly lower part is an input of the solve


def test_an_empty_batch_and_bad_systems() -> None:
    assert unit_lower_inverse(torch.zeros(0, 64, 64, device=DEVICE)).shape == (0, 64, 64)
    with pytest.raises(ValueError, match="at most 64 x 64"):
        unit_lower_inverse(torch.zeros(2, 65, 65, device=DEVICE))
    with pytest.raises(ValueError, match="at most 64 x 64"):
        unit_lower_inverse(torch.zeros(2, 64, 32, device=DEVICE))
    with pytest.raises(ValueError, match="float32"):
        unit_lower_inverse(torch.zeros(2, 64, 64, dtype=torch.float64, device=DEVICE))


@pytest.mark.gpu
def test_on_a_gpu_falcon3_takes_the_kernel_and_matches_solve_triangular(monkeypatch: pytest.MonkeyPatch) -> None:
    from kernels.falcon import window_solve
    from mixers import build_mixer

    torch.manual_seed(0)
    layer = build_mixer("falcon-3", 64, 2).cuda()
    x = torch.randn(4, 96, 64, device="cuda", requires_grad=True)
    taken = []
    real = window_solve.unit_lower_triangular_solve

    def watching(system, rhs):
        taken.append(system.is_cuda and system.dtype == torch.float32 and system.shape[-1] <= 64)
        return real(system, rhs)

    monkeypatch.setattr(window_solve, "unit_lower_triangular_solve", watching)
    y = layer(x)
    y.square().mean().backward()
    grads = [x.grad.clone()] + [p.grad.clone() for p in layer.parameters()]
    assert taken and all(taken)

    def reference(system, rhs):
        return torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)

    monkeypatch.setattr(window_solve, "unit_lower_triangular_solve", reference)
    x.grad = None
    layer.zero_grad()
    y_ref = layer(x)
    y_ref.square().mean().backward()
    assert torch.allclose(y, y_ref, rtol=1e-4, atol=1e-5)
    for g, ref in zip(grads, [x.grad] + [p.grad for p in layer.parameters()]):
        assert torch.allclose(g, ref, rtol=1e-3, atol=1e-5)
