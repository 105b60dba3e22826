"""``FalconAttention``, the Falcon layer alone: built from hidden_size, num_heads and the rule's options; its
cache continues a sequence exactly, a prompt prefilled in parallel then tokens one at a time or in blocks."""

from __future__ import annotations

import pytest
import torch

from falcon_lab.mixers import FalconAttention


@pytest.mark.parametrize("rule", ["falcon-1", "falcon-2", "falcon-3", "falcon-1a", "falcon-2a", "falcon-3a"])
def test_the_cache_continues_a_sequence_exactly(rule: str) -> None:
    torch.manual_seed(0)
    layer = FalconAttention(hidden_size=32, num_heads=2, rule=rule, variant="3", backend="chunk",
                            chunk_size=4).double()
    x = torch.randn(2, 11, 32, dtype=torch.float64)
    whole, none = layer(x)
    assert none is None and whole.shape == x.shape
    first, cache = layer(x[:, :6], use_cache=True)  # prefill in parallel
    torch.testing.assert_close(first, whole[:, :6])
    block, cache = layer(x[:, 6:9], cache=cache)  # a block continues in parallel
    torch.testing.assert_close(block, whole[:, 6:9])
    for t in (9, 10):  # then one token at a time
        y_t, cache = layer(x[:, t:t + 1], cache=cache, use_cache=True)
        torch.testing.assert_close(y_t[:, 0], whole[:, t])
    step = layer.mixer.init_cache(2, "cpu", torch.float64)  # the same as the mixer's own step
    for t in range(11):
        y_t, step = layer.mixer.step(x[:, t], step)
    torch.testing.assert_close(y_t, whole[:, 10])


def test_options_and_bad_input_are_named() -> None:
    layer = FalconAttention(hidden_size=32, num_heads=4, rule="falcon-3a", variant=None, window=2, qk_norm="l2")
    assert layer.mixer.opts.window == 2 and layer.mixer.opts.qk_norm == "l2" and layer.mixer.head_dim == 8
    with pytest.raises(ValueError, match="rule 'falcon-9' is not one of falcon-1"):
        FalconAttention(32, 2, rule="falcon-9")
    with pytest.raises(ValueError, match="variant '4' is not one of 1, 2, 3"):
        FalconAttention(32, 2, variant="4")
    with pytest.raises(ValueError, match="unknown option"):
        FalconAttention(32, 2, nonesuch=1)
    with pytest.raises(ValueError, match=r"hidden_states must be \[B, T, 32\], got \(2, 5, 16\)"):
        FalconAttention(32, 2)(torch.randn(2, 5, 16))
