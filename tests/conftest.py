"""Test-session setup: Triton's interpreter without CUDA, few threads, GPU tests skipped without a GPU."""

import os

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()

if not HAS_CUDA:
    # Triton reads this when it is first imported; tests import it only after this file runs.
    os.environ.setdefault("TRITON_INTERPRET", "1")

# The test machines are small and shared: more threads than cores only adds contention. Under pytest-xdist
# (`-n 2`) the workers share the cores.
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
torch.set_num_threads(max(1, min(2, (os.cpu_count() or 1) // WORKERS)))


@pytest.fixture(autouse=True)
def one_gpu_test_at_a_time(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """Under pytest-xdist, tests marked `gpu` take a lock the workers share: their timings and memory assume the
    device to themselves."""
    if not (HAS_CUDA and WORKERS > 1 and "gpu" in request.keywords):
        yield
        return
    from filelock import FileLock  # torch's own dependency

    with FileLock(str(tmp_path_factory.getbasetemp().parent / "gpu.lock")):
        yield


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip tests marked `gpu` when no CUDA device is present."""
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
