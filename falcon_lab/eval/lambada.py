"""LAMBADA last-word accuracy and last-word perplexity of a run's weights (the zero-shot measure).

Each record's `text` is split at its last space: the context is everything before it, the target is
" " + the last word, and both are tokenised apart (GPT-2 BPE may cut the target into several tokens).
The model reads EOT + context + target (its training documents start after an EOT), left-truncated to
the context length so that every target token is predicted. An example is correct when every target
token is the argmax given the true prefix (teacher-forced greedy: the same as generating the target
token by token); last-word perplexity is exp of the mean NLL over all target tokens.

Batches are right-padded: the model is causal, so padding after a row's last token changes none of
its logits, and the padded positions are never read.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from falcon_lab.eval.perplexity import MeanNLL

if TYPE_CHECKING:
    import tiktoken

RESULTS_FILE = "lambada.json"


@dataclass(frozen=True)
class Example:
    """One passage as token ids: the context (EOT first) and the last word's tokens."""

    context: tuple[int, ...]
    target: tuple[int, ...]


@dataclass
class LastWord(MeanNLL):
    """`correct` of `examples` last words right, and the summed NLL (nats) over their `tokens` tokens (its
    `ppl` is the last-word perplexity)."""

    name: str
    correct: int
    examples: int
    nll_sum: float
    tokens: int

    @property
    def accuracy(self) -> float:
        """Share of examples whose every target token is the argmax, in percent."""
        return 100.0 * self.correct / self.examples


def split_last_word(text: str, where: str = "text") -> tuple[str, str]:
    """(context, " " + last word) of `text`, split at its last space; ValueError naming `where` when
    there is no space or nothing after it."""
    context, sep, word = text.rpartition(" ")
    if not sep or not word or not context:
        raise ValueError(f"{where} needs a context, a space and a last word, got {text[-40:]!r}")
    return context, " " + word


def encode_examples(enc: tiktoken.Encoding, texts: Iterable[str], name: str = "lambada") -> list[Example]:
    """The passages of `texts` as examples, each context preceded by EOT; ValueError naming the record
    (1-based) that has no last word."""
    examples = []
    for i, text in enumerate(texts, start=1):
        context, target = split_last_word(text, f"{name} record {i}")
        examples.append(Example((enc.eot_token, *enc.encode_ordinary(context)), tuple(enc.encode_ordinary(target))))
    if not examples:
        raise ValueError(f"{name} holds no records")
    return examples


def _row(example: Example, max_len: int) -> tuple[list[int], int]:
    """Input ids (context + target minus its last token, left-truncated to `max_len`) and how many
    of its trailing positions predict the target."""
    ids = [*example.context, *example.target]
    n = len(example.target)
    if n > max_len:
        raise ValueError(f"a last word of {n} tokens does not fit a context length of {max_len}")
    return ids[:-1][-max_len:], n


@torch.no_grad()
def last_word_scores(
    model: nn.Module,
    examples: Sequence[Example],
    max_len: int,
    name: str = "lambada",
    batch_size: int = 8,
    device: torch.device | str = "cpu",
) -> LastWord:
    """Teacher-forced last-word accuracy and summed NLL of `model` on `examples`, reading at most
    `max_len` positions per example (the context is left-truncated)."""
    if max_len < 1 or batch_size < 1:
        raise ValueError(f"max_len and batch_size must be >= 1, got {max_len} and {batch_size}")
    if not examples:
        raise ValueError(f"{name}: no examples to score")
    correct, tokens = 0, 0
    total = torch.zeros((), dtype=torch.float64)
    for lo in range(0, len(examples), batch_size):
        block = examples[lo:lo + batch_size]
        rows = [_row(e, max_len) for e in block]
        width = max(len(ids) for ids, _ in rows)
        # Pad with each row's own last id: any id works, as no real position sees the padding.
        inputs = torch.tensor([ids + [ids[-1]] * (width - len(ids)) for ids, _ in rows], dtype=torch.long)
        logits = model(inputs.to(device)).float().cpu()
        for b, ((ids, n), example) in enumerate(zip(rows, block)):
            at = logits[b, len(ids) - n:len(ids)]
            target = torch.tensor(example.target, dtype=torch.long)
            correct += bool((at.argmax(-1) == target).all())
            total += F.cross_entropy(at, target, reduction="sum").double()
            tokens += n
    return LastWord(name, correct, len(examples), float(total), tokens)


def record(run_dir: str | Path, results: list[LastWord], **info: Any) -> Path:
    """Merge `results` (keyed by name) with `info` into `<run>/lambada.json`, atomically; returns its path."""
    from falcon_lab.runs import atomic_write_text

    path = Path(run_dir) / RESULTS_FILE
    data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    for result in results:
        data[result.name] = {**asdict(result), "accuracy": result.accuracy, "nll": result.nll, "ppl": result.ppl,
                             **info}
    atomic_write_text(path, json.dumps(data, indent=2) + "\n")
    return path
