"""Addition evaluation (paper §5.2): teacher-forced whole-suffix accuracy per digit width, per-token
accuracy beside it, and free-running greedy accuracy.

The table's columns come from ``summarise``: in-distribution validation accuracy (widths 1–32), the mean
over the held-out widths 33–48, Acc@33 and Acc@48 (a run's `eval.widths` and `eval.held_out_from` name other
ranges). Validation and OOD samples come from their own seeded streams, never the training one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from falcon_lab.tasks.addition import (
    EOS,
    IGNORE_INDEX,
    generate_records,
    labelled_correct,
    prompt_ids,
    suffix_accuracy,
    summarise,
    teacher_forced_batch,
)


def split_widths(widths: tuple[int, int] = (1, 48), held_out_from: int = 33) -> tuple[range, range]:
    """The validation widths and the held-out ones of an evaluation over `widths` (inclusive) that holds out
    every width from `held_out_from` on: the paper's 1–32 and 33–48 by default."""
    lo, hi = widths
    return range(lo, min(held_out_from, hi + 1)), range(max(held_out_from, lo), hi + 1)


@dataclass
class AdditionReport:
    """Per-width accuracies in percent and the summary columns of the paper's table, over the validation
    and held-out widths given (the paper's 1–32 and 33–48 by default)."""

    teacher_forced: dict[int, float]
    per_token: dict[int, float]
    free_running: dict[int, float] = field(default_factory=dict)
    val_widths: range = range(1, 33)
    ood_widths: range = range(33, 49)
    # mean teacher-forced cross-entropy (nats) of the answer tokens on the validation widths
    val_loss: float | None = None

    def summary(self) -> dict[str, Any]:
        def summarise(per_n: dict[int, float]) -> dict[str, float | None]:
            return summarise_widths(per_n, self.val_widths, self.ood_widths)

        out = {k: v for k, v in summarise(self.teacher_forced).items()}
        tokens = summarise(self.per_token)
        out["val_token_acc"] = tokens["val_acc"]
        out["ood_token_mean"] = tokens["ood_mean"]
        out["val_loss"] = self.val_loss
        if self.free_running:
            free = summarise(self.free_running)
            out["free_val_acc"] = free["val_acc"]
            out["free_ood_mean"] = free["ood_mean"]
        return out


def summarise_widths(per_n: dict[int, float], val_widths: range, ood_widths: range) -> dict[str, float | None]:
    """`falcon_lab.tasks.addition.summarise` over the validation and held-out widths given as ranges: val_acc, ood_mean,
    and the accuracy at the first and the last held-out width (`acc@33`, `acc@48` for the paper's)."""
    return summarise(per_n, (val_widths.start, val_widths.stop - 1), (ood_widths.start, ood_widths.stop - 1))


def _records_by_width(split: str, widths: range, n_per_length: int, seed: int) -> dict[int, list[dict]]:
    by_n: dict[int, list[dict]] = {}
    for r in generate_records(split, (widths.start, widths.stop - 1), n_per_length, seed):
        by_n.setdefault(r["n"], []).append(r)
    return by_n


def eval_batch_size(device: torch.device | str, n_per_length: int) -> int:
    """Rows a teacher-forced batch takes: 512 on a GPU, where a small model's pass waits on the host, several widths a
    batch; on a CPU, which computes every padded position, one width a batch."""
    return 512 if torch.device(device).type == "cuda" else max(n_per_length, 1)


@lru_cache(maxsize=8)
def _split_batches(split: str, widths: range, n_per_length: int, seed: int,
                   batch_size: int) -> tuple[dict[int, int], tuple[tuple[torch.Tensor, torch.Tensor], ...]]:
    """A split's records in width order as teacher-forced batches of `batch_size` rows, and how many records each
    width has. The same at every evaluation of a run: made once a process (their making took as long as the
    passes over them)."""
    by_n = _records_by_width(split, widths, n_per_length, seed)
    ordered = [r for n in sorted(by_n) for r in by_n[n]]
    batches = tuple(teacher_forced_batch(ordered[i:i + batch_size]) for i in range(0, len(ordered), batch_size))
    return {n: len(by_n[n]) for n in sorted(by_n)}, batches


@torch.no_grad()
def teacher_forced(model: nn.Module, records: list[dict] | None, device: torch.device, batch_size: int = 256,
                   batches: Sequence[tuple[torch.Tensor, torch.Tensor]] | None = None,
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Whole-suffix correctness, right tokens, scored tokens and the summed cross-entropy (nats) of the scored
    tokens for each record (or each row of the teacher-forced `batches` given in their place). The scores stay
    on the device until the last batch: the host queues each pass without waiting for the one before."""
    if batches is None:
        assert records is not None, "teacher_forced needs records or their batches"
        batches = [teacher_forced_batch(records[i:i + batch_size]) for i in range(0, len(records), batch_size)]
    whole, right, total, loss = [], [], [], []
    for input_ids, labels in batches:
        logits = model(input_ids.to(device, non_blocking=True)).float()
        labels = labels.to(device)
        acc = suffix_accuracy(logits, labels)
        whole.append(acc.whole_correct)
        right.append(acc.per_token_correct)
        total.append(acc.n_tokens)
        loss.append(F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=IGNORE_INDEX,
                                    reduction="none").sum(dim=-1))
    return torch.cat(whole).cpu(), torch.cat(right).cpu(), torch.cat(total).cpu(), torch.cat(loss).cpu()


@torch.no_grad()
def greedy(model: nn.Module, records: list[dict], device: torch.device) -> torch.Tensor:
    """Free-running greedy decoding of records of one width: correct iff the model writes the target and
    then EOS. Uses the model's recurrent ``step`` when it can (O(1) per token), else re-runs the
    prefix."""
    n = records[0]["n"]
    if any(r["n"] != n for r in records):
        raise ValueError("greedy() decodes records of one width at a time")
    prompts = torch.tensor([prompt_ids(r) for r in records], device=device)
    steps = n + 2  # n + 1 sum digits, then EOS
    if hasattr(model, "step") and hasattr(model, "init_cache") and getattr(model, "can_step", True):
        cache = model.init_cache(len(records), device)
        for t in range(prompts.shape[1]):
            logits, cache = model.step(prompts[:, t], cache)
        generated = []
        for _ in range(steps):
            token = logits.argmax(-1)
            generated.append(token)
            logits, cache = model.step(token, cache)
        out = torch.stack(generated, 1)
    else:
        seq = prompts
        for _ in range(steps):
            token = model(seq)[:, -1].argmax(-1)
            seq = torch.cat([seq, token[:, None]], 1)
        out = seq[:, prompts.shape[1]:]
    from falcon_lab.tasks.addition import encode

    want = torch.tensor([encode(r["target"]) + [EOS] for r in records], device=device)
    return (out == want).all(-1).cpu()


def evaluate_addition(model: nn.Module, *, n_per_length: int = 100, seed: int = 0,
                      val_widths: range = range(1, 33), ood_widths: range = range(33, 49),
                      free_running: bool = False, device: torch.device | None = None,
                      batch_size: int | None = None) -> AdditionReport:
    """Teacher-forced (and optionally greedy) accuracy per width on the val (1–32) and OOD (33–48) splits,
    or the ranges given.

    The teacher-forced pass runs the records of a split in width order, `batch_size` rows at a time, each
    row PAD-ded after its end to the longest of its batch: a causal model's predictions at a row's own
    positions do not see the padding, so a batch may hold several widths. Default: 512 rows on a GPU, where
    a pass of a small model waits on the host (10 passes for the 4,800 records of widths 1–48 at 100 a
    width, not 48); on a CPU, which computes every padded position, one width a batch (`n_per_length`)."""
    device = device or next(model.parameters()).device
    batch_size = batch_size or eval_batch_size(device, n_per_length)
    was_training = model.training
    model.eval()
    tf, tok, free = {}, {}, {}
    val_loss = None
    try:
        for split, widths in (("val", val_widths), ("ood", ood_widths)):
            if len(widths) == 0:
                continue
            counts, batches = _split_batches(split, widths, n_per_length, seed, batch_size)
            whole, right, total, loss = teacher_forced(model, None, device, batches=batches)
            if split == "val":
                val_loss = loss.sum().item() / max(total.sum().item(), 1)
            start = 0
            for n, count in counts.items():
                part = slice(start, start + count)
                start = part.stop
                tf[n] = 100.0 * whole[part].float().mean().item()
                tok[n] = 100.0 * right[part].sum().item() / max(total[part].sum().item(), 1)
            if free_running:
                for n, records in sorted(_records_by_width(split, widths, n_per_length, seed).items()):
                    free[n] = 100.0 * greedy(model, records, device).float().mean().item()
    finally:
        model.train(was_training)
    return AdditionReport(teacher_forced=tf, per_token=tok, free_running=free, val_widths=val_widths,
                          ood_widths=ood_widths, val_loss=val_loss)


@torch.no_grad()
def position_accuracy(model: nn.Module, *, widths: range = range(1, 49), n_per_length: int = 100, seed: int = 0,
                      device: torch.device | None = None, batch_size: int | None = None,
                      held_out_from: int = 33) -> dict[int, list[float]]:
    """Teacher-forced accuracy (%) of each target position per width n: n + 2 numbers, the sum's digits
    least significant first (position n is the carry digit) and then EOS. Where a model's answers break
    past the trained widths, this says whether it loses the digits beyond the trained positions or every
    digit of an unseen width. Samples: the val split for the widths before `held_out_from` (1–32),
    the OOD split from it on, as `evaluate_addition` draws them, in its batches (several widths a batch on a
    GPU, the same batches as its passes), the scores kept on the device until the last."""
    device = device or next(model.parameters()).device
    batch_size = batch_size or eval_batch_size(device, n_per_length)
    was_training = model.training
    model.eval()
    out: dict[int, list[float]] = {}
    try:
        for split, wanted in zip(("val", "ood"), split_widths((widths.start, widths.stop - 1), held_out_from)):
            if len(wanted) == 0:
                continue
            counts, batches = _split_batches(split, wanted, n_per_length, seed, batch_size)
            right = [labelled_correct(model(ids.to(device, non_blocking=True)).float(), labels.to(device))
                     for ids, labels in batches]
            longest = max(r.shape[1] for r in right)
            correct = torch.cat([F.pad(r, (0, longest - r.shape[1])) for r in right]).cpu()
            start = 0
            for n, count in counts.items():
                rows = correct[start:start + count, :n + 2]
                start += count
                out[n] = (100.0 * rows.float().mean(0)).tolist()
    finally:
        model.train(was_training)
    return out


def position_rows(accuracy: dict[int, list[float]], **fields: Any) -> list[dict[str, Any]]:
    """`position_accuracy`'s numbers as the rows of positions.csv: `fields` (run, step, ...), then width,
    position (0 = least significant digit; n = the carry digit; n + 1 = EOS), token (digit or eos) and
    accuracy, one row per position."""
    return [{**fields, "width": n, "position": j, "token": "eos" if j == len(accs) - 1 else "digit",
             "accuracy": acc}
            for n, accs in sorted(accuracy.items()) for j, acc in enumerate(accs)]

