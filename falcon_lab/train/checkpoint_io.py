"""Checkpoints that appear whole or not at all (written to a temporary file, then renamed), the one before the
last kept beside it, and the choice of the one a run resumes from."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from falcon_lab.config import ConfigError
from falcon_lab.runs import atomic_write


class AtomicCheckpointIO(TorchCheckpointIO):
    """TorchCheckpointIO whose saves go to a temporary file in the target folder, are flushed to
    disk, and replace the target with os.replace: a kill mid-save leaves the previous checkpoint."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | os.PathLike[str],
                        storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options, got {storage_options!r}")
        atomic_write(path, lambda f: torch.save(checkpoint, f))


class CheckpointError(ConfigError):
    """A run's checkpoint cannot be read, and no earlier good one is at hand; the message is one line."""


def checkpoint_problem(path: str | os.PathLike[str]) -> tuple[int | None, str | None]:
    """Load the training checkpoint at `path` whole (on the CPU): its step and None when it reads as one,
    else None and why not, in a few words."""
    path = Path(path)
    try:
        if path.stat().st_size == 0:
            return None, "the file is empty"
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # a cut or damaged file fails in torch, zipfile or pickle, with any of their errors
        return None, short_reason(err)
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt or "global_step" not in ckpt:
        return None, "it holds no training state (no state_dict and global_step)"
    return int(ckpt["global_step"]), None


def short_reason(err: BaseException) -> str:
    """An exception as a few words on one line: its type and the first sentence of its message."""
    text = str(err).strip().splitlines()
    first = text[0].split(". ")[0].rstrip(".")[:160] if text else ""
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


@dataclass
class ResumePoint:
    """Where a run resumes: the checkpoint and its step (None for both: from the start), and, when the last
    checkpoint was unreadable, why (`skipped`)."""

    path: Path | None = None
    step: int | None = None
    skipped: str | None = None


def resume_point(last: Path, previous: Path) -> ResumePoint:
    """The checkpoint a run resumes from, each one loaded whole before anything of the run is touched: `last`
    when it reads, else `previous` (the one before it). CheckpointError when one exists and none reads."""
    reasons = []
    for path in (last, previous):
        if not path.exists():
            continue
        step, why = checkpoint_problem(path)
        if why is None:
            skipped = "; ".join(reasons) or None
            return ResumePoint(path, step, skipped)
        reasons.append(f"{path} cannot be read ({why})")
    if not reasons:
        return ResumePoint()
    raise CheckpointError(f"{' and '.join(reasons)}, and no earlier checkpoint reads: move the folder "
                          f"{last.parent} aside to train the run from its start")


def save_keeping_previous(trainer: pl.Trainer, last: Path, previous: Path) -> None:
    """Save the trainer's whole state to `last`, the checkpoint there becoming `previous` first (rank zero
    renames; every rank takes part in the save): two good checkpoints, so a resume has one to fall back on."""
    if trainer.is_global_zero and last.exists():
        os.replace(last, previous)
    trainer.save_checkpoint(last, weights_only=False)
