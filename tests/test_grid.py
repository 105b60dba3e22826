"""falcon_lab.kernels.common.grid: the slices of rows and packed sequences within CUDA's launch limits (no kernels run here;
the kernels' slicing itself is held in test_decayed, test_delta_rule and test_triton_inner_product)."""

import pytest
import torch

from falcon_lab.kernels.common import grid


@pytest.mark.parametrize("limit", [4, 8, 40, 300, grid.MAX_GRID_ROWS])
def test_sequence_groups_read_from_the_tensor_are_those_of_the_list(monkeypatch, limit):
    """``cu_seqlens`` itself or its offsets as a list give the same groups, at limits from one sequence a group to
    every sequence in one; each group stays within the limit unless it is one sequence alone."""
    monkeypatch.setattr(grid, "MAX_GRID_ROWS", limit)
    gen = torch.Generator().manual_seed(limit)
    for n, heads, chunk in [(1, 1, 16), (7, 2, 16), (50, 6, 64), (400, 3, 32)]:
        lengths = torch.randint(1, 90, (n,), generator=gen)
        bounds = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
        listed = grid.sequence_groups(bounds.tolist(), heads, chunk)
        assert grid.sequence_groups(bounds, heads, chunk) == listed
        assert grid.sequence_groups(bounds.int(), heads, chunk) == listed
        assert [i for i, _ in listed] == [0] + [j for _, j in listed[:-1]] and listed[-1][1] == n
        for i, j in listed:
            slots = sum(grid.SLOTS_PER_CHUNK * -(-int(x) // chunk) for x in lengths[i:j])
            assert j - i == 1 or ((j - i) * heads <= limit and slots <= limit)
