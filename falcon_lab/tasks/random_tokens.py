"""Uniform random token batches for speed runs: deterministic in (seed, step, rank), labels = next token."""

from __future__ import annotations

import hashlib

import torch


def random_token_batch(
    vocab_size: int,
    seq_len: int,
    batch_size: int,
    seed: int = 0,
    step: int = 0,
    rank: int = 0,
    device: torch.device | str = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, labels), each [batch_size, seq_len] int64, ids uniform in [0, vocab_size).

    `labels[:, i]` is `input_ids[:, i + 1]`, the last one the next token of the same draw. Ranks
    and steps draw from distinct streams (a sha256 of seed, step and rank seeds the generator).
    """
    for name, value, least in (("vocab_size", vocab_size, 1), ("seq_len", seq_len, 1),
                               ("batch_size", batch_size, 1), ("step", step, 0), ("rank", rank, 0)):
        if int(value) < least:
            raise ValueError(f"{name} must be >= {least}, got {value}")
    name = f"random_tokens|{int(seed)}|{int(step)}|{int(rank)}".encode()
    gen = torch.Generator().manual_seed(int.from_bytes(hashlib.sha256(name).digest()[:8], "little") >> 1)
    tokens = torch.randint(0, vocab_size, (batch_size, seq_len + 1), generator=gen, dtype=torch.int64)
    tokens = tokens.to(device)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
