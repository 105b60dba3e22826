"""The Triton top-eigenvalue kernel of Falcon-3's μ_t (falcon_lab/kernels/window/triton_eig4.py) against eigvalsh.

On a CPU the kernel runs under Triton's interpreter (tests/conftest.py); a falcon-3 layer with it:
tests/test_falcon3_triton_parts.py.
"""

from __future__ import annotations

import pytest
import torch

from falcon_lab.kernels.window.triton_eig4 import top_eigenpair, top_eigenvalue_small

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def grams(n: int, W: int, dk: int = 8, seed: int = 0) -> torch.Tensor:
    """Window Grams X Xᵀ of n random windows of W keys, some of them rank-deficient (a key repeated, a
    key zero, every key zero) as windows at a sequence's start or of equal keys are."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, W, dk, generator=gen) * torch.rand(n, 1, 1, generator=gen).mul(10).exp()
    x[: n // 8, -1] = x[: n // 8, 0]  # a repeated key
    x[n // 8: n // 4, 0] = 0.0  # an invalid pair's zero key
    x[n // 4: n // 4 + 4] = 0.0  # a window with no pair at all
    return (x @ x.transpose(-1, -2)).to(DEVICE)


@pytest.mark.parametrize("W", [1, 2, 3, 4])
def test_the_top_eigenpair_of_window_grams_is_eigvalsh_s(W: int) -> None:
    G = grams(600, W)
    lam, vec = top_eigenpair(G)
    ref = torch.linalg.eigvalsh(G.double())[..., -1]
    scale = torch.linalg.matrix_norm(G.double()).clamp_min(1e-30)
    assert ((lam.double() - ref).abs() / scale).max() < 1e-5  # float32 rounding: ~2e-7 seen
    assert lam[150:154].eq(0).all()  # the empty windows: μ = 0 exactly
    # a unit eigenvector of λ_max: G u = λ u
    assert (vec.norm(dim=-1) - 1).abs().max() < 2e-5
    residual = (G.double() @ vec.double()[..., None]).squeeze(-1) - lam.double()[..., None] * vec.double()
    assert (residual.norm(dim=-1) / scale).max() < 2e-5


@pytest.mark.parametrize("W", [2, 4])
def test_indefinite_matrices_and_a_batch_of_leading_dimensions(W: int) -> None:
    gen = torch.Generator().manual_seed(W)
    S = torch.randn(3, 5, 70, W, W, generator=gen)
    S = (S + S.transpose(-1, -2)).to(DEVICE)  # eigenvalues of both signs, some all negative
    lam, vec = top_eigenpair(S)
    assert lam.shape == (3, 5, 70) and vec.shape == (3, 5, 70, W)
    assert torch.allclose(lam, torch.linalg.eigvalsh(S)[..., -1], atol=5e-5)


def test_the_gradient_is_eigvalsh_s() -> None:
    G = grams(300, 4, seed=1)[80:]  # no empty window
    G = G / torch.linalg.matrix_norm(G)[:, None, None]
    top2 = torch.linalg.eigvalsh(G.double())[..., -2:]
    G = G[(top2[:, 1] - top2[:, 0]) > 0.05 * top2[:, 1]]  # a clear gap: the eigenvector, so the gradient, is sharp
    a = G.clone().requires_grad_(True)
    b = G.clone().requires_grad_(True)
    weight = torch.randn(G.shape[0], generator=torch.Generator().manual_seed(2)).to(DEVICE)
    (top_eigenvalue_small(a) * weight).sum().backward()
    (torch.linalg.eigvalsh(b)[..., -1] * weight).sum().backward()
    assert torch.allclose(a.grad, b.grad, atol=2e-5)


def test_an_empty_batch_and_a_wrong_shape() -> None:
    lam, vec = top_eigenpair(torch.zeros(0, 4, 4, device=DEVICE))
    assert lam.shape == (0,) and vec.shape == (0, 4)
    with pytest.raises(ValueError, match="at most 4 x 4"):
        top_eigenpair(torch.zeros(2, 5, 5, device=DEVICE))
    with pytest.raises(ValueError, match="at most 4 x 4"):
        top_eigenpair(torch.zeros(2, 4, 3, device=DEVICE))
