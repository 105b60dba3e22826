"""What the pytest-xdist workers of one session share: folders built once for all of them."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def built_once(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[tuple[Path, bool]]:
    """A folder the workers of one session share, and whether the caller must build it.

    A module-scoped fixture runs once in every worker that runs a test of its module, so an expensive one (a
    sweep, DDP runs) builds into this folder under a lock, once, and the other workers wait for it and read what
    it left; the folder counts as built only when the block ends without an error. Without pytest-xdist: a fresh
    folder of this session, to build."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        yield tmp_path_factory.mktemp(name), True
        return
    from filelock import FileLock  # torch's own dependency

    root = tmp_path_factory.getbasetemp().parent  # this session's, shared by its workers
    folder, built = root / f"shared-{name}", root / f"shared-{name}.built"
    with FileLock(str(root / f"shared-{name}.lock")):
        build = not built.exists()
        if build:  # a worker's build that failed leaves nothing to build on
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
        yield folder, build
        if build:
            built.touch()
