"""The chunk forms' backward does no work per chunk that scales with the whole sequence.

Their pass over the chunks takes chunk n's slice of each per-chunk tensor. Taken by indexing (`t[:, :, n]`),
each slice's backward writes a zero tensor the size of all of `t`: N chunks, N whole-tensor writes per input,
O(N²) over a sequence (at T = 8192 one falcon-3 layer's forward and backward took 29.2 s that way and 4.6 s
with the slices taken by `unbind`, on a CPU: `records/bench/chunk_loops_cpu/`). The elements zero-filled in
the backward must grow in proportion to the number of chunks (small per-chunk buffers are fine), not with
its square.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from falcon_lab.kernels.falcon.api import fast_weight_rule
from tests.rules_util import rule_inputs

CHUNK = 4
FILLS = ("aten::zero_", "aten::fill_")


def elements_zero_filled_in_backward(rule: str, chunks: int) -> int:
    inputs = rule_inputs(rule, B=1, T=chunks * CHUNK, H=1, Dk=4, Dv=3, dtype=torch.float32, requires_grad=True)
    o, _ = fast_weight_rule(**inputs, rule=rule, backend="chunk", chunk_size=CHUNK)
    loss = o.square().sum()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        loss.backward()
    return sum(math.prod(e.input_shapes[0]) for e in prof.events() if e.name in FILLS and e.input_shapes)


@pytest.mark.parametrize("rule", ["falcon-1", "falcon-2", "falcon-1a", "falcon-3"])
def test_the_backward_zero_fills_in_proportion_to_the_chunks(rule: str) -> None:
    few, many = elements_zero_filled_in_backward(rule, 4), elements_zero_filled_in_backward(rule, 32)
    # eight times the chunks: about eight times the elements when linear, sixty-four when quadratic
    assert many <= 10 * few, f"{rule}: {few} elements zero-filled in the backward at 4 chunks, {many} at 32"
