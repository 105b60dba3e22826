"""The Falcon mixers on the fused Triton backend equal the chunk form, forward and backward (run by Triton's
CPU interpreter here, at head dim 16)."""

from __future__ import annotations

import pytest
import torch

from mixers import build_mixer


@pytest.mark.parametrize("name", ["falcon-1", "falcon-2", "falcon-1a.3", "falcon-2a", "falcon-3a.3"])
def test_triton_backend_matches_chunk_in_a_mixer(name):
    torch.manual_seed(0)
    chunk = build_mixer(name, 32, 2, backend="chunk", chunk_size=16)
    fused = build_mixer(name, 32, 2, backend="triton", chunk_size=16)
    fused.load_state_dict(chunk.state_dict())
    x = torch.randn(2, 21, 32)
    outs, grads = [], []
    for mixer in (chunk, fused):
        xi = x.clone().requires_grad_(True)
        y = mixer(xi)
        y.square().sum().backward()
        outs.append(y.detach())
        grads.append(xi.grad)
    rel = lambda a, b: ((a - b).norm() / b.norm()).item()  # noqa: E731
    assert torch.isfinite(outs[1]).all()
    assert rel(outs[1], outs[0]) < 1e-4 and rel(grads[1], grads[0]) < 1e-4
