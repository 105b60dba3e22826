"""Language-modelling batches from token shards: the batch of step s is a pure function of (seed, s, rank).

A row is a window of seq_len + 1 consecutive tokens of one train shard: input_ids are its first
seq_len tokens, labels the next token at each position. The step's global batch draws its window
starts from a generator seeded by (seed, step), uniformly over every start in every shard, and rank
r takes rows r·b .. r·b + b − 1, so the data does not depend on the number of ranks and a resumed
run sees exactly the batches an uninterrupted one would. Validation reads the val shard in
consecutive, non-overlapping windows.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import torch

from falcon_lab.tasks.fineweb.build import read_manifest
from falcon_lab.tasks.fineweb.shards import find_shards, read_shard


class ShardSet:
    """The shards of one split of a folder, memory-mapped, with their window starts numbered
    consecutively across shards."""

    def __init__(self, folder: str | os.PathLike[str], split: str, seq_len: int, vocab_size: int) -> None:
        if seq_len < 1:
            raise ValueError(f"seq_len must be >= 1, got {seq_len}")
        self.folder, self.split, self.seq_len = Path(folder), split, seq_len
        self.paths = find_shards(folder, split)
        # Shards made here record their tokenizer's size; others (llm.c's) are scanned token by token.
        manifest = read_manifest(folder)
        made_for = None if manifest is None else manifest["settings"]["vocab_size"]
        if made_for is not None and made_for > vocab_size:
            raise ValueError(f"shards of {folder} hold ids of a {made_for}-id tokenizer, more than the "
                             f"vocabulary of {vocab_size} ids (data.vocab_size)")
        scan = None if made_for is not None else vocab_size
        self.tokens = [read_shard(p, scan) for p in self.paths]
        # A shard of n tokens holds n - seq_len windows of seq_len + 1 tokens.
        starts = [max(len(t) - seq_len, 0) for t in self.tokens]
        if sum(starts) == 0:
            raise ValueError(f"{split} shards of {folder} hold no window of {seq_len + 1} tokens "
                             f"(longest shard: {max(len(t) for t in self.tokens)} tokens); lower data.seq_len")
        self.bounds = np.cumsum([0, *starts])

    @property
    def n_windows(self) -> int:
        """How many distinct window starts there are."""
        return int(self.bounds[-1])

    def window(self, index: int) -> np.ndarray:
        """Window number `index` (0 <= index < n_windows): seq_len + 1 tokens of one shard."""
        shard = int(np.searchsorted(self.bounds, index, side="right")) - 1
        start = index - int(self.bounds[shard])
        return self.tokens[shard][start:start + self.seq_len + 1]

    def rows(self, indices: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """(input_ids, labels), [len(indices), seq_len] int64, of the windows numbered `indices`."""
        block = np.stack([self.window(int(i)) for i in indices]).astype(np.int64)
        tokens = torch.from_numpy(block)
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def step_generator(seed: int, step: int) -> np.random.Generator:
    """The generator of `step`'s window starts: seeded by a sha256 of (seed, step)."""
    name = f"fineweb|{int(seed)}|{int(step)}".encode()
    return np.random.default_rng(int.from_bytes(hashlib.sha256(name).digest()[:8], "little"))


def train_batch(
    shards: ShardSet, batch_size: int, seed: int, step: int, rank: int = 0, world_size: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, labels) of `step` on `rank`: [batch_size / world_size, seq_len] int64 each, rows
    rank·b .. rank·b + b − 1 of the step's global batch of `batch_size` random windows."""
    if step < 0 or not 0 <= rank < world_size or batch_size % world_size:
        raise ValueError(f"need step >= 0, 0 <= rank < world_size and batch_size divisible by world_size; "
                         f"got step={step}, rank={rank}, world_size={world_size}, batch_size={batch_size}")
    starts = step_generator(seed, step).integers(0, shards.n_windows, size=batch_size)
    local = batch_size // world_size
    return shards.rows(starts[rank * local:(rank + 1) * local])


def val_windows(shards: ShardSet, max_windows: int) -> np.ndarray:
    """Indices of the first `max_windows` non-overlapping windows of the split (a window's last token
    is the next one's first input, so every token after the first is predicted once)."""
    indices = []
    for shard, tokens in enumerate(shards.tokens):
        base = int(shards.bounds[shard])
        for start in range(0, len(tokens) - shards.seq_len, shards.seq_len):
            if len(indices) == max_windows:
                return np.array(indices, dtype=np.int64)
            indices.append(base + start)
    return np.array(indices, dtype=np.int64)
