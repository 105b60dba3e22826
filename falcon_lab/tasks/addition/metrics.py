"""Evaluation helpers for addition that know nothing of models: records and tensors in, numbers out."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import torch

from falcon_lab.tasks.addition.batches import IGNORE_INDEX, SampleSpan, pack_rows, positions_needed
from falcon_lab.tasks.addition.vocab import BOS, EOS, encode


def teacher_forced_batch(
    records: Sequence[dict[str, Any]], bos: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """One record per row, left-aligned and PAD-ed to the longest: (input_ids, labels), [N, L] int64.

    Labels are IGNORE_INDEX except on each target digit and its EOS.
    """
    if not records:
        raise ValueError("teacher_forced_batch: records is empty")
    seq_len = max(positions_needed(r["n"], bos) for r in records)
    batch = pack_rows([[r] for r in records], seq_len, bos)
    return batch.input_ids, batch.labels


class SuffixAccuracy(NamedTuple):
    """Per row: every labelled position right ([N] bool), labelled positions right and in all ([N] int64)."""

    whole_correct: torch.Tensor
    per_token_correct: torch.Tensor
    n_tokens: torch.Tensor


def _predictions(logits_or_preds: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    if logits_or_preds.dim() == labels.dim() + 1:
        preds = logits_or_preds.argmax(dim=-1)
    elif logits_or_preds.dim() == labels.dim() and not logits_or_preds.is_floating_point():
        preds = logits_or_preds
    else:
        raise ValueError(
            "logits_or_preds must be logits [..., L, V] (float) or predicted ids shaped like labels "
            f"(integer); got {tuple(logits_or_preds.shape)} {logits_or_preds.dtype} "
            f"for labels {tuple(labels.shape)}"
        )
    if preds.shape != labels.shape:
        raise ValueError(f"predictions {tuple(preds.shape)} do not match labels {tuple(labels.shape)}")
    return preds.to(labels.device)


def suffix_accuracy(logits_or_preds: torch.Tensor, labels: torch.Tensor) -> SuffixAccuracy:
    """Teacher-forced accuracy of each row of `labels` [N, L] (IGNORE_INDEX = not scored).

    A row counts as correct only if every labelled position (target digits and EOS) is predicted
    exactly; a row with no labelled position is not correct.
    """
    preds = _predictions(logits_or_preds, labels)
    scored = labels != IGNORE_INDEX
    right = (preds == labels) & scored
    per_token_correct = right.sum(dim=-1)
    n_tokens = scored.sum(dim=-1)
    whole = (per_token_correct == n_tokens) & (n_tokens > 0)
    return SuffixAccuracy(whole, per_token_correct, n_tokens)


def target_position_correct(logits_or_preds: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Teacher-forced correctness of each labelled position, in order: [N, K] bool for rows that all have
    K labelled positions (records of one width n: the n + 1 sum digits, least significant first, then
    EOS). ValueError when the rows differ in how many positions they label."""
    preds = _predictions(logits_or_preds, labels)
    scored = labels != IGNORE_INDEX
    counts = scored.sum(dim=-1)
    if counts.numel() and not bool((counts == counts[0]).all()):
        raise ValueError(f"rows label {sorted(set(counts.tolist()))} positions; per-position accuracy needs "
                         "rows of one width")
    k = int(counts[0]) if counts.numel() else 0
    return (preds == labels)[scored].view(labels.shape[0], k)


def labelled_correct(logits_or_preds: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Teacher-forced correctness of each row's labelled positions, in order, left-aligned: [N, L] bool (L the
    rows' length) whose first k columns are a row's k labelled positions and the rest False. Rows of any widths
    together, on the device, with no read back to the host (``target_position_correct`` for rows of one width)."""
    preds = _predictions(logits_or_preds, labels)
    scored = labels != IGNORE_INDEX
    N, L = labels.shape
    slot = torch.where(scored, scored.long().cumsum(dim=-1) - 1, torch.full_like(labels, L))  # L: set aside
    out = torch.zeros(N, L + 1, dtype=torch.bool, device=labels.device)
    out.scatter_(1, slot, (preds == labels) & scored)
    return out[:, :L]


def span_correct(
    logits_or_preds: torch.Tensor, labels: torch.Tensor, spans: Iterable[SampleSpan]
) -> torch.Tensor:
    """Whole-suffix correctness of each sample of a (packed) batch, one bool per span."""
    preds = _predictions(logits_or_preds, labels)
    right = ((preds == labels) | (labels == IGNORE_INDEX)).cpu()
    return torch.tensor([bool(right[s.row, s.start : s.stop].all()) for s in spans], dtype=torch.bool)


def prompt_ids(record: dict[str, Any], bos: bool = False) -> list[int]:
    """Token ids to feed before free-running generation: `[BOS] prompt`."""
    return ([BOS] if bos else []) + encode(record["prompt"])


def free_running_check(pred: str | Sequence[int], record: dict[str, Any]) -> bool:
    """Whether a greedy continuation of the prompt is right.

    `pred` as token ids: the first n+1 ids must spell the target and the next must be EOS (ids
    after it are ignored), so n + 2 generated tokens suffice. `pred` as text (EOS already cut off,
    e.g. by `decode`): it must equal the target exactly.
    """
    target = record["target"]
    if isinstance(pred, str):
        return pred == target
    ids = [int(i) for i in pred]
    return ids[: len(target) + 1] == encode(target) + [EOS]


def per_width_accuracy(correct: torch.Tensor | Sequence[bool], widths: Sequence[int]) -> dict[int, float]:
    """Percentage of correct samples for each width, from per-sample flags and their widths."""
    flags = [bool(c) for c in correct]
    if len(flags) != len(widths):
        raise ValueError(f"correct has {len(flags)} entries but widths has {len(widths)}")
    totals: dict[int, list[int]] = {}
    for flag, n in zip(flags, widths):
        t = totals.setdefault(int(n), [0, 0])
        t[0] += flag
        t[1] += 1
    return {n: 100.0 * right / count for n, (right, count) in sorted(totals.items())}


def summarise(
    per_n: Mapping[int, float],
    val_digits: tuple[int, int] = (1, 32),
    ood_digits: tuple[int, int] = (33, 48),
) -> dict[str, float | None]:
    """The table's columns from per-width accuracies (units as given, percentages by convention).

    `val_acc`: mean over the widths of `val_digits` present; `ood_mean`: mean over every width of
    `ood_digits` (None unless all are present); `acc@<lo>`, `acc@<hi>` of the ood range (None if
    absent). Equal sample counts per width make a mean over widths the mean over samples.
    """
    vlo, vhi = val_digits
    olo, ohi = ood_digits
    val = [v for n, v in per_n.items() if vlo <= n <= vhi]
    ood_widths = range(olo, ohi + 1)
    return {
        "val_acc": sum(val) / len(val) if val else None,
        "ood_mean": (
            sum(per_n[n] for n in ood_widths) / len(ood_widths)
            if all(n in per_n for n in ood_widths)
            else None
        ),
        f"acc@{olo}": per_n.get(olo),
        f"acc@{ohi}": per_n.get(ohi),
    }
