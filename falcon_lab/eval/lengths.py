"""Evaluation of the synthetic tasks (mqar, parity, permutation): accuracy per sequence length.

For every train length (samples of the val split) and every held-out length (the test split), the share
of sequences whose every scored position is right (whole-sequence accuracy: every running parity or
product, every MQAR answer) and the share of scored positions right (per-token accuracy). The summary
columns follow addition's: `val_acc` and `val_token_acc` over the train lengths (the in-distribution
numbers a best step is chosen on), `ood_mean` and `ood_token_mean` over the held-out lengths.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from falcon_lab.tasks.addition import suffix_accuracy
from falcon_lab.tasks.synthetic import SequenceTask, eval_samples, pad_batch


@dataclass
class LengthReport:
    """Per-length accuracies in percent (whole sequence and per token) and the lengths trained on."""

    teacher_forced: dict[int, float]
    per_token: dict[int, float]
    train_lengths: tuple[int, int]

    def summary(self) -> dict[str, Any]:
        lo, hi = self.train_lengths

        def mean(per_n: dict[int, float], inside: bool) -> float | None:
            values = [v for n, v in per_n.items() if (lo <= n <= hi) == inside]
            return sum(values) / len(values) if values else None

        return {"val_acc": mean(self.teacher_forced, True), "ood_mean": mean(self.teacher_forced, False),
                "val_token_acc": mean(self.per_token, True), "ood_token_mean": mean(self.per_token, False)}


def eval_lengths(train_lengths: tuple[int, int], test_lengths: tuple[int, int]) -> list[tuple[str, int]]:
    """(split, length) of every length evaluated: the train lengths on val samples, then the held-out ones
    on test samples."""
    return ([("val", n) for n in range(train_lengths[0], train_lengths[1] + 1)]
            + [("test", n) for n in range(test_lengths[0], test_lengths[1] + 1)])


@torch.no_grad()
def evaluate_lengths(model: nn.Module, task: SequenceTask, *, train_lengths: tuple[int, int],
                     test_lengths: tuple[int, int], n_per_length: int = 100, seed: int = 0,
                     device: torch.device | None = None, batch_size: int = 256) -> LengthReport:
    """Whole-sequence and per-token accuracy of `model` at every train and held-out length, `n_per_length`
    samples each (the same samples for every model: streams (task, split, seed, length)).

    The samples go in length order, `batch_size` rows a pass, each row PAD-ded after its end to the longest
    of its pass: a causal model's outputs at a row's own positions do not see the padding, and a pass of a
    small model costs about the same for few rows as for many, so the passes are few."""
    device = device or next(model.parameters()).device
    was_training = model.training
    model.eval()
    samples, lengths = [], []
    for split, n in eval_lengths(train_lengths, test_lengths):
        samples += eval_samples(task, split, n, n_per_length, seed)
        lengths += [n] * n_per_length
    whole, right, scored = [], [], []
    try:
        for i in range(0, len(samples), batch_size):
            input_ids, labels = pad_batch(samples[i:i + batch_size])
            acc = suffix_accuracy(model(input_ids.to(device)).float(), labels.to(device))
            whole.append(acc.whole_correct)
            right.append(acc.per_token_correct)
            scored.append(acc.n_tokens)
    finally:
        model.train(was_training)
    per_row = torch.stack([torch.cat(whole).long(), torch.cat(right), torch.cat(scored)]).cpu()
    by_length = torch.tensor(lengths)
    teacher_forced: dict[int, float] = {}
    per_token: dict[int, float] = {}
    for n in dict.fromkeys(lengths):
        rows, right_n, scored_n = per_row[:, by_length == n].sum(1).tolist()
        teacher_forced[n] = 100.0 * rows / n_per_length
        per_token[n] = 100.0 * right_n / max(scored_n, 1)
    return LengthReport(teacher_forced, per_token, tuple(train_lengths))
