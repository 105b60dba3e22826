"""Streamed training batches for addition: the batch of step s is a pure function of (seed, s, rank).

A sample is the token sequence `[BOS] prompt target EOS`. Batches hold next-token pairs:
`input_ids[b, i]` is read at position i and `labels[b, i]` is the token to predict there, or
IGNORE_INDEX unless that token belongs to a target suffix or is its EOS (the loss is on the suffix
only, paper §5.2).

Packing puts several samples in one row, back to back, with no state reset between them: a
recurrent mixer (fast-weight state included) carries its state from one sample into the next, and
attention sees the earlier samples. A sample is never cut: a row ends when the next drawn width no
longer fits, and the rest of the row is padding. With `apart`, the samples drawn for the packed rows are
laid out one to a row instead (rows as long as the widest sample of the step's width range): the same
samples and target tokens, each a sequence of its own, so that no state or attention crosses from one
sample into the next, for any mixer.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch.utils.data import IterableDataset, get_worker_info

from falcon_lab.tasks.addition.generate import check_digits, check_split, derive_seed, sample_record
from falcon_lab.tasks.addition.vocab import BOS, EOS, encode, encode_bytes

IGNORE_INDEX = -100

DigitsArg = tuple[int, int] | Callable[[int], tuple[int, int]]


def sample_tokens(record: dict[str, Any], bos: bool = False) -> tuple[list[int], int]:
    """Token ids `[BOS] prompt target EOS` of one record, and the index where its target begins."""
    ids = ([BOS] if bos else []) + encode(record["prompt"])
    start = len(ids)
    return ids + encode(record["target"]) + [EOS], start


def positions_needed(n: int, bos: bool = False) -> int:
    """Input positions a width-n sample takes: its token count minus one (3n + 3, plus 1 with BOS)."""
    return 3 * n + 3 + int(bos)


@dataclass(frozen=True)
class SampleSpan:
    """Where one sample's labels lie: `labels[row, start:stop]` (target digits, then EOS)."""

    row: int
    start: int
    stop: int
    n: int


@dataclass(frozen=True)
class AdditionBatch:
    """`input_ids`, `labels`: [B, L] int64; `spans`: one SampleSpan per sample, row by row."""

    input_ids: torch.Tensor
    labels: torch.Tensor
    spans: tuple[SampleSpan, ...]

    def to(self, device: torch.device | str, non_blocking: bool = False) -> AdditionBatch:
        """The same batch with its tensors on `device`."""
        return replace(
            self,
            input_ids=self.input_ids.to(device, non_blocking=non_blocking),
            labels=self.labels.to(device, non_blocking=non_blocking),
        )

    def pin_memory(self) -> AdditionBatch:
        """The same batch in pinned host memory (called by DataLoader(pin_memory=True))."""
        return replace(self, input_ids=self.input_ids.pin_memory(), labels=self.labels.pin_memory())


def pack_rows(
    rows: list[list[dict[str, Any]]], seq_len: int, bos: bool = False
) -> AdditionBatch:
    """Lay out the records of each row back to back into [len(rows), seq_len] tensors, PAD after.

    Fast path; its exact slow twin is `sample_tokens` applied record by record.
    """
    width = seq_len + 1
    tokens = bytearray(len(rows) * width)  # zero bytes are PAD
    labelled = bytearray(len(rows) * width)
    head = chr(BOS) if bos else ""
    spans = []
    for r, records in enumerate(rows):
        parts, used = [], 0
        for record in records:
            prompt, target = record["prompt"], record["target"]
            start = used + len(head) + len(prompt)
            stop = start + len(target) + 1
            parts.append(f"{head}{prompt}{target}{chr(EOS)}")
            labelled[r * width + start : r * width + stop] = b"\x01" * (stop - start)
            # Token j is predicted at input position j - 1.
            spans.append(SampleSpan(r, start - 1, stop - 1, record["n"]))
            used = stop
        if used > width:
            raise ValueError(f"row {r} needs {used - 1} positions, more than seq_len={seq_len}")
        tokens[r * width : r * width + used] = encode_bytes("".join(parts))
    tokens_t = torch.frombuffer(tokens, dtype=torch.uint8).view(len(rows), width).long()
    labelled_t = torch.frombuffer(labelled, dtype=torch.bool).view(len(rows), width)
    labels = torch.where(labelled_t[:, 1:], tokens_t[:, 1:], IGNORE_INDEX)
    return AdditionBatch(tokens_t[:, :-1].contiguous(), labels, tuple(spans))


def make_batch(
    seed: int,
    step: int,
    batch_size: int,
    digits: tuple[int, int] = (1, 32),
    seq_len: int | None = None,
    pack: bool = False,
    rank: int = 0,
    bos: bool = False,
    split: str = "train",
    apart: bool = False,
) -> AdditionBatch:
    """The batch of `step` on `rank`: `batch_size` rows, widths uniform over `digits` (inclusive).

    Row i of rank r draws from its own stream (split, seed, step, global row r * batch_size + i),
    so ranks never share rows and R ranks of B rows see exactly the rows one rank of R * B would.
    Without packing a row is one sample, padded to `seq_len` (default: the widest sample of the
    range). With packing, `seq_len` is required and a row takes samples until the next drawn width
    does not fit. `split` names the stream (train unless streaming evaluation batches). `apart` (with
    packing): the same samples one to a row, rows of the widest sample of `digits`; the row count then
    varies from step to step.
    """
    check_split(split)
    lo, hi = check_digits(digits)
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if step < 0 or rank < 0:
        raise ValueError(f"step and rank must be >= 0, got step={step}, rank={rank}")
    widest = positions_needed(hi, bos)
    if seq_len is None:
        if pack:
            raise ValueError("pack=True needs seq_len (the packed row length)")
        seq_len = widest
    elif seq_len < widest:
        raise ValueError(f"seq_len={seq_len} is too short: width {hi} needs {widest} positions")
    rows = []
    for i in range(batch_size):
        rng = random.Random(derive_seed(split, seed, "step", step, "row", rank * batch_size + i))
        if not pack:
            rows.append([sample_record(rng, rng.randint(lo, hi))])
            continue
        records, used = [], 0
        while True:
            n = rng.randint(lo, hi)
            # The sample's token count; a row of seq_len positions holds seq_len + 1 tokens.
            need = positions_needed(n, bos) + 1
            if used + need > seq_len + 1:
                break
            records.append(sample_record(rng, n))
            used += need
        rows.append(records)
    if pack and apart:
        return pack_rows([[record] for records in rows for record in records], widest, bos)
    return pack_rows(rows, seq_len, bos)


class AdditionStream(IterableDataset):
    """Endless (or `num_steps` long) iterable of `make_batch` batches from `start_step` on.

    `digits` is a width range or a function step -> range (a curriculum). Use with
    `DataLoader(stream, batch_size=None)`; with several workers, worker w makes steps
    start_step + w, + w + W, ... so the loader still yields steps in order. Resuming at step s
    gives the same batches as an uninterrupted run.
    """

    def __init__(
        self,
        seed: int,
        batch_size: int,
        digits: DigitsArg = (1, 32),
        seq_len: int | None = None,
        pack: bool = False,
        rank: int = 0,
        start_step: int = 0,
        num_steps: int | None = None,
        bos: bool = False,
    ) -> None:
        if start_step < 0 or (num_steps is not None and num_steps < 0):
            raise ValueError(f"start_step and num_steps must be >= 0, got {start_step}, {num_steps}")
        if not callable(digits):
            check_digits(digits)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.seed, self.batch_size, self.digits = seed, batch_size, digits
        self.seq_len, self.pack, self.rank, self.bos = seq_len, pack, rank, bos
        self.start_step, self.num_steps = start_step, num_steps

    def batch(self, step: int) -> AdditionBatch:
        """The batch of `step`."""
        digits = self.digits(step) if callable(self.digits) else self.digits
        return make_batch(
            self.seed, step, self.batch_size, digits, self.seq_len, self.pack, self.rank, self.bos
        )

    def __iter__(self) -> Iterator[AdditionBatch]:
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        step = self.start_step + worker
        stop = None if self.num_steps is None else self.start_step + self.num_steps
        while stop is None or step < stop:
            yield self.batch(step)
            step += workers
