"""Checkpoints that appear whole or not at all: written to a temporary file, then renamed."""

from __future__ import annotations

import os
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from falcon_lab.runs import atomic_write


class AtomicCheckpointIO(TorchCheckpointIO):
    """TorchCheckpointIO whose saves go to a temporary file in the target folder, are flushed to
    disk, and replace the target with os.replace: a kill mid-save leaves the previous checkpoint."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | os.PathLike[str],
                        storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options, got {storage_options!r}")
        atomic_write(path, lambda f: torch.save(checkpoint, f))
