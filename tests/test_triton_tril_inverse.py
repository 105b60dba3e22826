"""The Triton inverse of Falcon-3's unit lower-triangular window systems (falcon_lab/kernels/window/triton_tril_inverse.py)
against torch.linalg.solve_triangular: values and gradients.

On a CPU the kernel runs under Triton's interpreter (tests/conftest.py); a falcon-3 layer with it:
tests/test_falcon3_triton_parts.py.
"""

from __future__ import annotations

import pytest
import torch

from falcon_lab.kernels.window.triton_tril_inverse import unit_lower_inverse, unit_lower_solve

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
    assert torch.allclose(T @ L, torch.eye(n, device=DEVICE).expand(6, n, n), atol=5e-5)  # ~2e-6 seen
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
    assert torch.allclose(Z, Z_ref, rtol=1e-4, atol=5e-5)
    assert torch.allclose(R.grad, R_ref.grad, rtol=1e-4, atol=5e-5)
    assert torch.allclose(A.grad, A_ref.grad, rtol=1e-4, atol=2e-4)
    assert A.grad.triu().eq(0).all()  # only the strictly lower part is an input of the solve


def test_an_empty_batch_and_bad_systems() -> None:
    assert unit_lower_inverse(torch.zeros(0, 64, 64, device=DEVICE)).shape == (0, 64, 64)
    with pytest.raises(ValueError, match="at most 64 x 64"):
        unit_lower_inverse(torch.zeros(2, 65, 65, device=DEVICE))
    with pytest.raises(ValueError, match="at most 64 x 64"):
        unit_lower_inverse(torch.zeros(2, 64, 32, device=DEVICE))
    with pytest.raises(ValueError, match="float32"):
        unit_lower_inverse(torch.zeros(2, 64, 64, dtype=torch.float64, device=DEVICE))
