"""Test-session setup: Triton's interpreter without CUDA, few threads, GPU tests skipped without a GPU."""

import os

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()

if not HAS_CUDA:
    # Triton reads this when it is first imported; tests import it only after this file runs.
    os.environ.setdefault("TRITON_INTERPRET", "1")

# The test machines are small and shared: more threads than cores only adds contention.
torch.set_num_threads(min(2, os.cpu_count() or 1))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip tests marked `gpu` when no CUDA device is present."""
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
