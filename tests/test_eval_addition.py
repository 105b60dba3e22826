"""The addition evaluation against models whose answers are known: an exact adder, and one that forgets
the final carry."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from falcon_lab.eval.addition import evaluate_addition, greedy, position_accuracy, position_rows
from falcon_lab.tasks.addition import EOS, VOCAB_SIZE, decode, encode, generate_records
from falcon_lab.tasks.addition.vocab import EQUALS


class Adder(nn.Module):
    """Reads each row's prompt and puts all logit mass on the right next token. ``drop_carry_from``:
    widths from which it answers as if the final carry were lost (a known, width-dependent error)."""

    def __init__(self, drop_carry_from: int | None = None) -> None:
        super().__init__()
        self.anchor = nn.Parameter(torch.zeros(1))  # gives the module a device
        self.drop_carry_from = drop_carry_from

    def answer(self, a: str, b: str) -> list[int]:
        n = len(a)
        total = int(a) + int(b)
        if self.drop_carry_from is not None and n >= self.drop_carry_from:
            total %= 10 ** n
        return encode(str(total).zfill(n + 1)[::-1]) + [EOS]

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        logits = torch.full((*input_ids.shape, VOCAB_SIZE), -1e4)
        for row, ids in enumerate(input_ids.tolist()):
            if EQUALS not in ids:
                continue
            eq = ids.index(EQUALS)
            a, b = decode(ids[:eq]).split("+")
            want = self.answer(a, b)
            for j, token in enumerate(want):
                if eq + j < len(ids):
                    logits[row, eq + j, token] = 0.0
        return logits


class StepAdder(Adder):
    """The same adder behind a recurrent ``step`` interface (it re-reads its own token history)."""

    def init_cache(self, batch: int, device) -> list[list[int]]:
        return [[] for _ in range(batch)]

    def step(self, tokens: torch.Tensor, cache):
        for row, t in enumerate(tokens.tolist()):
            cache[row].append(t)
        ids = torch.tensor(cache)
        return self.forward(ids)[:, -1], cache


def test_an_exact_adder_scores_100_everywhere():
    report = evaluate_addition(Adder(), n_per_length=3, free_running=True)
    assert set(report.teacher_forced) == set(range(1, 49))
    assert all(v == 100.0 for v in report.teacher_forced.values())
    assert all(v == 100.0 for v in report.free_running.values())
    s = report.summary()
    assert s["val_acc"] == s["ood_mean"] == s["acc@33"] == s["acc@48"] == 100.0
    assert s["val_token_acc"] == 100.0
    assert s["val_loss"] == pytest.approx(0.0, abs=1e-6)  # every answer token given all the probability


def test_the_validation_loss_is_the_mean_cross_entropy_of_the_answer_tokens():
    class Uniform(nn.Module):
        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            return torch.zeros((*input_ids.shape, VOCAB_SIZE))

    report = evaluate_addition(Uniform(), n_per_length=2, val_widths=range(1, 5), ood_widths=range(5, 6),
                               device=torch.device("cpu"))
    assert report.summary()["val_loss"] == pytest.approx(math.log(VOCAB_SIZE))


def test_a_lost_carry_shows_up_only_where_the_carry_exists():
    report = evaluate_addition(Adder(drop_carry_from=40), n_per_length=20, free_running=True)
    assert all(report.teacher_forced[n] == 100.0 for n in range(1, 40))
    records = list(generate_records("ood", (40, 48), 20))
    # a sample is wrong iff its sum has a carry out of the top digit
    for n in range(40, 49):
        carries = [int(r["a"]) + int(r["b"]) >= 10 ** n for r in records if r["n"] == n]
        expected = 100.0 * (1 - sum(carries) / len(carries))
        assert abs(report.teacher_forced[n] - expected) < 1e-4
        assert abs(report.free_running[n] - expected) < 1e-4
        # one wrong token (the top sum digit) out of n + 2 scored
        assert report.per_token[n] > 100.0 * (n + 1) / (n + 2) - 1e-9


def test_greedy_uses_the_recurrent_step_when_present():
    records = list(generate_records("val", (7, 7), 20))
    assert greedy(StepAdder(), records, torch.device("cpu")).all()
    with_carry = [r for r in records if int(r["a"]) + int(r["b"]) >= 10 ** 7]
    assert with_carry
    assert not greedy(StepAdder(drop_carry_from=1), with_carry, torch.device("cpu")).any()


def test_per_position_accuracy_finds_the_lost_carry_at_the_carry_digit_only():
    accuracy = position_accuracy(Adder(drop_carry_from=40), n_per_length=20)
    assert sorted(accuracy) == list(range(1, 49))
    assert all(len(accuracy[n]) == n + 2 for n in accuracy)  # n + 1 digits, then EOS
    assert all(v == 100.0 for n in range(1, 40) for v in accuracy[n])
    records = list(generate_records("ood", (40, 48), 20))
    for n in range(40, 49):
        carries = [int(r["a"]) + int(r["b"]) >= 10 ** n for r in records if r["n"] == n]
        *digits, carry, end = accuracy[n]
        assert digits == [100.0] * n and end == 100.0
        assert abs(carry - 100.0 * (1 - sum(carries) / len(carries))) < 1e-4
    rows = position_rows({2: [100.0, 50.0, 0.0, 100.0]}, run="r", step=7)
    assert rows[1] == {"run": "r", "step": 7, "width": 2, "position": 1, "token": "digit", "accuracy": 50.0}
    assert [r["token"] for r in rows] == ["digit", "digit", "digit", "eos"]


def test_per_position_accuracy_refuses_rows_of_different_widths():
    import pytest

    from falcon_lab.tasks.addition import target_position_correct, teacher_forced_batch

    _, labels = teacher_forced_batch([*generate_records("val", (2, 3), 1)])
    with pytest.raises(ValueError, match="per-position accuracy needs rows of one width"):
        target_position_correct(labels.clone(), labels)


@pytest.mark.parametrize("mixer", ["transformer", "falcon-1a.3", "mamba2", "gated-deltanet"])
def test_batches_of_several_widths_score_as_one_width_a_batch(mixer: str) -> None:
    # Rows PAD-ded after their end: a causal model's predictions at a row's own positions are those of the
    # row alone, so mixing widths in a batch changes no score.
    from falcon_lab.mixers import LanguageModel

    from falcon_lab.config import load_config
    from falcon_lab.eval.addition import _records_by_width, teacher_forced
    from falcon_lab.train.module import lm_config

    torch.manual_seed(0)
    model = LanguageModel(lm_config(load_config("tiny", overrides=[f"mixer={mixer}"]))).eval()
    # a little training-like asymmetry so that the untrained model's answers are not all alike
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    report = evaluate_addition(model, n_per_length=4, seed=3, val_widths=range(1, 13), ood_widths=range(33, 36),
                               batch_size=16)
    val_loss, val_tokens = 0.0, 0
    for split, widths in (("val", range(1, 13)), ("ood", range(33, 36))):
        for n, records in _records_by_width(split, widths, 4, 3).items():
            whole, right, total, loss = teacher_forced(model, records, torch.device("cpu"))
            assert report.teacher_forced[n] == 100.0 * whole.float().mean().item()
            assert report.per_token[n] == pytest.approx(100.0 * right.sum().item() / total.sum().item(), abs=1e-9)
            if split == "val":
                val_loss, val_tokens = val_loss + loss.sum().item(), val_tokens + total.sum().item()
    assert report.val_loss == pytest.approx(val_loss / val_tokens, rel=1e-5)


def test_per_position_accuracy_is_the_same_whether_a_batch_holds_one_width_or_many():
    """Rows of several widths in one batch (a GPU's batches) score each position as rows of one width do."""
    from falcon_lab.tasks.addition import labelled_correct, target_position_correct, teacher_forced_batch

    model = Adder(drop_carry_from=3)
    apart = position_accuracy(model, widths=range(1, 7), n_per_length=8, held_out_from=5)
    together = position_accuracy(model, widths=range(1, 7), n_per_length=8, held_out_from=5, batch_size=1000)
    assert apart == together and any(v < 100.0 for n in (3, 4) for v in apart[n])
    records = list(generate_records("val", (2, 4), 3))
    ids, labels = teacher_forced_batch(records)
    mixed = labelled_correct(model(ids), labels)
    for n in (2, 3, 4):
        rows = [i for i, r in enumerate(records) if r["n"] == n]
        one_width = target_position_correct(*(t[rows] for t in (model(ids), labels)))
        assert torch.equal(mixed[rows, :n + 2], one_width) and not mixed[rows, n + 2:].any()
