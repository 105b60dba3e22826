"""Training and validation batches of a run, a pure function of (config, step, rank).

The rows of a step are numbered globally: rank r of R holds rows r·b .. r·b + b − 1 of the step's
global batch of R·b rows, so a run sees the same data on any number of devices and a resumed run
sees exactly the batches an uninterrupted one would.
"""

from __future__ import annotations

import os

import signal
from collections.abc import Iterator
from functools import lru_cache

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from falcon_lab.config import RunConfig
from falcon_lab.task import task_of
from falcon_lab.tasks.fineweb import ShardSet
from falcon_lab.tasks.synthetic import SequenceTask

Batch = tuple[torch.Tensor, torch.Tensor]


def vocab_size(cfg: RunConfig) -> int:
    """Vocabulary size the task needs."""
    return task_of(cfg.task).vocab_size(cfg)


def sequence_task(cfg: RunConfig) -> SequenceTask:
    """The generator of the run's task with a length axis (``falcon_lab.task.LengthTask``), with its data.* options."""
    return task_of(cfg.task).generator(cfg)


def seq_len(cfg: RunConfig) -> int:
    """Positions per row: data.seq_len, or the task's natural length."""
    if cfg.data.seq_len is not None:
        return cfg.data.seq_len
    return task_of(cfg.task).seq_len(cfg)


@lru_cache(maxsize=4)
def fineweb_shards(path: str, split: str, length: int, vocab: int) -> ShardSet:
    """The memory-mapped shards of one split, opened (and their tokens checked) once per process."""
    return ShardSet(path, split, length, vocab)


def train_widths(cfg: RunConfig, step: int) -> tuple[int, int]:
    """The addition width range of `step`'s batch: data.widths, or the curriculum's range at `step`."""
    return task_of("addition").train_widths(cfg, step)


def train_lengths(cfg: RunConfig, step: int) -> tuple[int, int]:
    """A synthetic task's length range at `step`: data.lengths, or the curriculum's range at `step` (its longest
    length ramped from data.start_width, as addition's widest width is)."""
    return task_of(cfg.task).train_lengths(cfg, step)


def train_batch(cfg: RunConfig, step: int, rank: int, world_size: int) -> Batch:
    """(input_ids, labels) of `step` for `rank`: [batch_size / world_size, seq_len] int64 each (isolated
    addition samples keep their packed rows: the model keeps them apart, `falcon_lab.mixers.positions`)."""
    return task_of(cfg.task).train_batch(cfg, step, rank, world_size)


class TrainBatches(IterableDataset):
    """Batches of steps start_step, start_step + 1, ... for one rank; endless.

    With W loader workers, worker w makes steps start_step + w, + w + W, ... so the loader still
    yields them in order.
    """

    def __init__(self, cfg: RunConfig, rank: int, world_size: int, start_step: int = 0) -> None:
        self.cfg, self.rank, self.world_size, self.start_step = cfg, rank, world_size, start_step

    def __iter__(self) -> Iterator[Batch]:
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        step = self.start_step + worker
        while True:
            yield train_batch(self.cfg, step, self.rank, self.world_size)
            step += workers


class ValBatches(IterableDataset):
    """The task's fixed validation set (``Task.val_batches``: addition's val split, data.val_per_length per
    width; a synthetic task's data.val_per_length per train length; FineWeb's first data.val_windows windows of
    its val shard), in batches of at most batch_size rows; every rank evaluates all of it."""

    def __init__(self, cfg: RunConfig) -> None:
        self.batches = task_of(cfg.task).val_batches(cfg) or []

    def __iter__(self) -> Iterator[Batch]:
        return iter(self.batches)


ShardValBatches = ValBatches  # FineWeb's validation set, its task's as every task's


def loader_workers() -> int:
    """Loader processes a GPU rank takes: up to 4, a quarter of the machine's cores (the rest for the ranks, their
    compilers and the other ranks' loaders), at least 1."""
    return max(1, min(4, (os.cpu_count() or 1) // 4))


def loader_worker_init(worker: int) -> None:
    """A loader process computes with one thread and leaves SIGINT to the trainer: Ctrl-C in a terminal (or
    `timeout --signal=INT`) signals the whole process group, and the trainer, which stops after the step in
    hand and saves a checkpoint there, needs its loader to keep serving until it has. The loader ends with
    the trainer."""
    torch.set_num_threads(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class LabData(pl.LightningDataModule):
    """The run's loaders. The training stream starts at the trainer's step, which on resume is the
    restored one, so a resumed run continues with the very next batch."""

    def __init__(self, cfg: RunConfig) -> None:
        super().__init__()
        self.cfg = cfg

    def train_dataloader(self) -> DataLoader:
        t = self.trainer
        batches = TrainBatches(self.cfg, t.global_rank, t.world_size, start_step=t.global_step)
        if not torch.cuda.is_available() or t.accelerator.__class__.__name__ == "CPUAccelerator":
            return DataLoader(batches, batch_size=None)
        # On a GPU loader processes make the next batches while the GPU runs this one: a packed addition
        # batch of 256 rows takes 11-57 ms of Python on one core (the narrow widths of a curriculum's start
        # the slowest), more than a compiled step of the table's size, so one process would hold the GPU
        # back. The batches stay the same, a function of the step alone, whatever the number of processes.
        workers = loader_workers()
        return DataLoader(batches, batch_size=None, num_workers=workers, prefetch_factor=max(2, 8 // workers),
                          pin_memory=True, persistent_workers=True, worker_init_fn=loader_worker_init)

    def val_dataloader(self) -> DataLoader | list:
        if not task_of(self.cfg.task).validates:  # random tokens: nothing to validate
            return []
        return DataLoader(ValBatches(self.cfg), batch_size=None)
