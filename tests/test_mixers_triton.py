"""The Falcon mixers, DeltaNet and Gated DeltaNet (on falcon-1's kernels) on the fused Triton backend equal the
chunk form, forward and backward (on a GPU when there is one, else by Triton's CPU interpreter, at head dim 16)."""

from __future__ import annotations

import pytest
import torch

from falcon_lab.mixers import build_mixer

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# the interpreter does every dot in fp32 exactly; on a GPU the chunk form's matmuls and the kernels' dots
# round differently (as in tests/test_triton_inner_product.py: 1e-3 there)
TOL = 1e-4 if DEVICE == "cpu" else 1e-3


@pytest.mark.parametrize("name", ["falcon-1", "falcon-2", "falcon-3", "falcon-1a.3", "falcon-2a", "falcon-3a.3", "deltanet",
                                  "gated-deltanet"])
def test_triton_backend_matches_chunk_in_a_mixer(name):
    torch.manual_seed(0)
    chunk = build_mixer(name, 32, 2, backend="chunk", chunk_size=16).to(DEVICE)
    fused = build_mixer(name, 32, 2, backend="triton", chunk_size=16).to(DEVICE)
    fused.load_state_dict(chunk.state_dict())
    x = torch.randn(2, 21, 32, device=DEVICE)
    outs, grads = [], []
    for mixer in (chunk, fused):
        xi = x.clone().requires_grad_(True)
        y = mixer(xi)
        y.square().sum().backward()
        outs.append(y.detach())
        grads.append(xi.grad)
    rel = lambda a, b: ((a - b).norm() / b.norm()).item()  # noqa: E731
    assert torch.isfinite(outs[1]).all()
    assert rel(outs[1], outs[0]) < TOL and rel(grads[1], grads[0]) < TOL


@pytest.mark.parametrize("name", ["deltanet", "gated-deltanet", "retnet", "falcon-1a.3"])
def test_triton_backend_restarts_at_packed_samples_as_on_rows_apart(name):
    """Isolated samples on the fused kernels (the samples of packed rows as the rule's packed sequences) equal
    the same mixer over each sample laid on a row of its own, forward and backward."""
    from falcon_lab.mixers.positions import samples_apart

    torch.manual_seed(0)
    mixer = build_mixer(name, 32, 2, backend="triton", chunk_size=16).to(DEVICE)
    samples = torch.tensor([[0] * 5 + [1] * 11 + [2] * 4, [0] * 17 + [1] * 3], device=DEVICE)
    x = torch.randn(2, 20, 32, device=DEVICE)
    outs, grads = [], []
    for mix in (lambda h: mixer(h, samples=samples), lambda h: samples_apart(mixer, h, samples)):
        xi = x.clone().requires_grad_(True)
        y = mix(xi)
        y.square().sum().backward()
        outs.append(y.detach())
        grads.append(xi.grad)
    rel = lambda a, b: ((a - b).norm() / b.norm()).item()  # noqa: E731
    assert rel(outs[0], outs[1]) < TOL and rel(grads[0], grads[1]) < TOL
    whole = mixer(x).detach()  # one sequence a row: the samples after the first see those before them
    assert rel(whole[:, 5:], outs[0][:, 5:]) > 1e-2
