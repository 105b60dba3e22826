"""Perplexity of a run's weights on a token stream: the FineWeb-Edu val shard or local text files.

The stream is cut into consecutive, non-overlapping windows of seq_len predicted tokens (window w
reads tokens w·L .. w·L + L − 1 and predicts w·L + 1 .. w·L + L; the last window may be shorter),
so every token after the first is predicted once, with at most seq_len − 1 tokens of context.
Perplexity is exp of the token-weighted mean negative log-likelihood.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

RESULTS_FILE = "perplexity.json"


class MeanNLL:
    """The mean NLL and perplexity of a result holding `nll_sum` (nats) over `tokens` tokens."""

    nll_sum: float
    tokens: int

    @property
    def nll(self) -> float:
        """Mean negative log-likelihood per token, in nats."""
        return self.nll_sum / self.tokens

    @property
    def ppl(self) -> float:
        """exp of the mean NLL."""
        return math.exp(self.nll)


@dataclass
class Perplexity(MeanNLL):
    """Summed NLL (nats) over `tokens` predicted tokens, and its exp-mean."""

    name: str
    nll_sum: float
    tokens: int


def read_texts(path: str | Path) -> list[str]:
    """The documents of a local text file: a `.jsonl` file gives each record's `text` field (LAMBADA's
    layout), any other file is one document (WikiText-103's raw test file). ValueError naming the file
    and line that is malformed."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--text {path} does not exist")
    if path.suffix != ".jsonl":
        return [path.read_text(encoding="utf-8")]
    texts = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}: line {lineno}: not valid JSON ({err.msg})") from None
            if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                raise ValueError(f"{path}: line {lineno}: needs a string field 'text'")
            texts.append(record["text"])
    if not texts:
        raise ValueError(f"{path} holds no records")
    return texts


@torch.no_grad()
def stream_nll(
    model: nn.Module,
    tokens: np.ndarray,
    seq_len: int,
    name: str = "",
    max_tokens: int | None = None,
    batch_size: int = 8,
    device: torch.device | str = "cpu",
) -> Perplexity:
    """Summed NLL of `tokens[1:]` (at most `max_tokens` of them) in non-overlapping windows of `seq_len`."""
    if seq_len < 1 or batch_size < 1 or (max_tokens is not None and max_tokens < 1):
        raise ValueError(f"seq_len, batch_size and max_tokens must be >= 1, got {seq_len}, {batch_size}, {max_tokens}")
    n = len(tokens) - 1 if max_tokens is None else min(len(tokens) - 1, max_tokens)
    if n < 1:
        raise ValueError(f"{name or 'the stream'} has {len(tokens)} tokens; perplexity needs at least 2")
    stream = torch.from_numpy(np.asarray(tokens[:n + 1]).astype(np.int64))
    full = n // seq_len
    total = torch.zeros((), dtype=torch.float64)
    for lo in range(0, full, batch_size):
        hi = min(lo + batch_size, full)
        block = stream[lo * seq_len:hi * seq_len + 1]
        inputs = block[:-1].view(hi - lo, seq_len)
        labels = block[1:].view(hi - lo, seq_len)
        total += _nll_sum(model, inputs, labels, device)
    if n % seq_len:
        tail = stream[full * seq_len:]
        total += _nll_sum(model, tail[None, :-1], tail[None, 1:], device)
    return Perplexity(name, float(total), n)


def _nll_sum(model: nn.Module, inputs: torch.Tensor, labels: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    logits = model(inputs.to(device)).float()
    loss = F.cross_entropy(logits.flatten(0, -2), labels.to(device).flatten(), reduction="sum")
    return loss.double().cpu()


def record(run_dir: str | Path, results: list[Perplexity], **info: Any) -> Path:
    """Merge `results` (keyed by name) with `info` into `<run>/perplexity.json`, atomically; returns its path."""
    from falcon_lab.runs import atomic_write_text

    path = Path(run_dir) / RESULTS_FILE
    data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    for result in results:
        data[result.name] = {**asdict(result), "nll": result.nll, "ppl": result.ppl, **info}
    atomic_write_text(path, json.dumps(data, indent=2) + "\n")
    return path
