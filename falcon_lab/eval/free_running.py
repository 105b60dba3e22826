"""Free-running (greedy) addition accuracy, the fast way.

A sample counts as right only if every generated token is, so decoding stops for a sample at its
first wrong token, and for a width once no sample is left; each new token comes from one parallel
forward over the prefix, which for these short prompts costs far fewer calls than stepping the
prompt token by token. The exact slow twin is `falcon_lab.eval.addition.greedy`, which decodes every
sample to the end.

Why the number barely differs from teacher-forced accuracy: while a sample's output is right, its
greedy prefix is the teacher-forced one, so a whole-suffix match under greedy decoding is the same
event as a whole-suffix match under teacher forcing; only floating-point differences between a
forward over the prefix and one over the whole sample can part them.
"""

from __future__ import annotations

import torch
from torch import nn

from falcon_lab.tasks.addition import EOS, encode, generate_records, prompt_ids


@torch.no_grad()
def greedy_correct(model: nn.Module, records: list[dict], device: torch.device) -> torch.Tensor:
    """Whether greedy decoding of each record (all of one width) writes its target and then EOS; [N] bool."""
    if not records:
        raise ValueError("records is empty")
    n = records[0]["n"]
    if any(r["n"] != n for r in records):
        raise ValueError("greedy_correct decodes records of one width at a time")
    seq = torch.tensor([prompt_ids(r) for r in records], device=device)
    want = torch.tensor([encode(r["target"]) + [EOS] for r in records], device=device)
    alive = torch.arange(len(records), device=device)
    for j in range(want.shape[1]):
        token = model(seq)[:, -1].argmax(-1)
        right = token == want[alive, j]
        alive, seq = alive[right], torch.cat([seq[right], token[right, None]], 1)
        if alive.numel() == 0:
            break
    correct = torch.zeros(len(records), dtype=torch.bool)
    correct[alive.cpu()] = True
    return correct


def free_running_accuracy(model: nn.Module, *, n_per_length: int, seed: int = 0,
                          val_widths: range = range(1, 33), ood_widths: range = range(33, 49),
                          device: torch.device | None = None, batch_size: int = 256) -> dict[int, float]:
    """Greedy whole-suffix accuracy in percent per width, on the same val (1–32) and OOD (33–48)
    samples that `falcon_lab.eval.addition.evaluate_addition` draws for `n_per_length` and `seed`."""
    if n_per_length < 1:
        raise ValueError(f"n_per_length must be >= 1, got {n_per_length}")
    device = device or next(model.parameters()).device
    was_training = model.training
    model.eval()
    out: dict[int, float] = {}
    try:
        for split, widths in (("val", val_widths), ("ood", ood_widths)):
            if len(widths) == 0:
                continue
            by_n: dict[int, list[dict]] = {}
            for r in generate_records(split, (widths.start, widths.stop - 1), n_per_length, seed):
                by_n.setdefault(r["n"], []).append(r)
            for n, records in by_n.items():
                right = torch.cat([greedy_correct(model, records[i:i + batch_size], device)
                                   for i in range(0, len(records), batch_size)])
                out[n] = 100.0 * right.float().mean().item()
    finally:
        model.train(was_training)
    return out
