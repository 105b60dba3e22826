"""What the synthetic sequence tasks share: seeded streams, length ranges, padded batches, evaluation samples.

A sample is T input tokens and T labels: `labels[t]` is the token the model must output at position t,
having read `tokens[0..t]`, or IGNORE_INDEX where nothing is scored. Every random stream is a
`random.Random` seeded by `derive_seed`, a sha256 of the task's name, the split, the user's seed and the
stream's coordinates: the batch of a training step is a pure function of (seed, step, global row), and the
train, val and test streams differ for every pair of seeds.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from falcon_lab.tasks.addition.batches import IGNORE_INDEX

# train: the training stream; val: in-distribution evaluation (train lengths); test: held-out lengths.
SPLITS = ("train", "val", "test")
PAD = 0


@dataclass(frozen=True)
class Sample:
    """One sequence: input token ids and the label of every position (IGNORE_INDEX: not scored)."""

    tokens: tuple[int, ...]
    labels: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.tokens)


class SequenceTask(Protocol):
    """A task: its name, vocabulary, shortest length, a sampler and a human-readable view of a sample."""

    name: str
    vocab_size: int
    min_length: int

    def check_length(self, length: int) -> None:
        """ValueError unless the task can make a sample of `length` tokens."""

    def sample(self, rng: random.Random, length: int) -> Sample:
        """One sample of `length` tokens drawn with `rng`."""

    def record(self, sample: Sample) -> dict[str, Any]:
        """The sample as a JSON object: its tokens and labels, and what they mean."""


def check_split(split: str) -> None:
    """Raise ValueError unless `split` is one of SPLITS."""
    if split not in SPLITS:
        raise ValueError(f"split {split!r} is not one of {', '.join(SPLITS)}")


def derive_seed(task: str, split: str, seed: int, *coords: int | str) -> int:
    """A 64-bit seed for the stream named by (task, split, seed, *coords); distinct names give distinct seeds."""
    check_split(split)
    name = "|".join([task, split, str(int(seed)), *map(str, coords)])
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")


def check_lengths(lengths: Sequence[int], name: str = "lengths", least: int = 1) -> tuple[int, int]:
    """Validate an inclusive length range (lo, hi) with least <= lo <= hi; return it as ints."""
    try:
        lo, hi = (int(n) for n in lengths)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a pair [lo, hi] of lengths, got {lengths!r}") from None
    if not least <= lo <= hi:
        raise ValueError(f"{name} must satisfy {least} <= lo <= hi, got [{lo}, {hi}]")
    return lo, hi


def pad_batch(samples: Sequence[Sample], seq_len: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, labels), [N, seq_len] int64: one sample per row, left-aligned, PAD and IGNORE_INDEX after.

    `seq_len` defaults to the longest sample."""
    if not samples:
        raise ValueError("pad_batch: no samples")
    longest = max(len(s) for s in samples)
    seq_len = longest if seq_len is None else seq_len
    if seq_len < longest:
        raise ValueError(f"seq_len={seq_len} is shorter than the longest sample ({longest} tokens)")
    ids = torch.full((len(samples), seq_len), PAD, dtype=torch.int64)
    labels = torch.full((len(samples), seq_len), IGNORE_INDEX, dtype=torch.int64)
    for row, s in enumerate(samples):
        ids[row, : len(s)] = torch.tensor(s.tokens, dtype=torch.int64)
        labels[row, : len(s)] = torch.tensor(s.labels, dtype=torch.int64)
    return ids, labels


def train_samples(task: SequenceTask, seed: int, step: int, rows: range, lengths: tuple[int, int],
                  split: str = "train") -> list[Sample]:
    """The samples of global rows `rows` of `step`: row i draws its length uniformly from `lengths`
    (inclusive) and its sample from its own stream (task, split, seed, step, i)."""
    lo, hi = check_lengths(lengths, least=task.min_length)
    if step < 0 or rows.start < 0:
        raise ValueError(f"step and rows must be >= 0, got step={step}, rows={rows}")
    out = []
    for i in rows:
        rng = random.Random(derive_seed(task.name, split, seed, "step", step, "row", i))
        out.append(task.sample(rng, rng.randint(lo, hi)))
    return out


def make_batch(task: SequenceTask, seed: int, step: int, batch_size: int, lengths: tuple[int, int],
               seq_len: int | None = None, rank: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, labels) of `step` on `rank`: rows rank·batch_size .. of the step's global batch, so R
    ranks of b rows see exactly the rows one rank of R·b would; rows padded to `seq_len` (default:
    the longest train length)."""
    if batch_size < 1 or rank < 0:
        raise ValueError(f"batch_size must be >= 1 and rank >= 0, got {batch_size}, {rank}")
    lo, hi = check_lengths(lengths, least=task.min_length)
    samples = train_samples(task, seed, step, range(rank * batch_size, (rank + 1) * batch_size), (lo, hi))
    return pad_batch(samples, hi if seq_len is None else seq_len)


def eval_samples(task: SequenceTask, split: str, length: int, n: int, seed: int = 0) -> list[Sample]:
    """`n` samples of exactly `length` tokens from the stream (task, split, seed, length): a length's
    samples do not depend on which other lengths are evaluated."""
    task.check_length(length)
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    rng = random.Random(derive_seed(task.name, split, seed, "length", length))
    return [task.sample(rng, length) for _ in range(n)]
