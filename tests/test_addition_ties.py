"""The addition table's evaluations tied with the best step: the best is the earliest of those with the highest
val. acc., and the table also gives how many tie with it and their mean held-out accuracy."""

from __future__ import annotations

import pytest

from falcon_lab.eval.callback import pick_best
from falcon_lab.reproduce.addition_table import SEED_COLUMNS, metrics, tied_steps


def test_the_ties_are_every_evaluation_at_the_best_val_acc_and_their_held_out_mean() -> None:
    evals = [{"step": 200, "val_acc": 90.0, "ood_mean": 5.0},
             {"step": 400, "val_acc": 100.0, "ood_mean": 60.0},
             {"step": 600, "val_acc": 99.0, "ood_mean": 95.0},  # nearly as good, not tied: left out
             {"step": 800, "val_acc": 100.0, "ood_mean": 90.0},
             {"step": 1000, "val_acc": 100.0, "ood_mean": 96.0}]
    best = pick_best(evals)
    assert best is not None and best["step"] == 400  # the earliest among equals, as the paper's table reads
    assert tied_steps(evals, best) == {"tied_steps": 3.0, "tied_ood_mean": pytest.approx(82.0)}
    # one evaluation at the top: the tie is the best step alone
    assert tied_steps(evals[:3], pick_best(evals[:3])) == {"tied_steps": 1.0, "tied_ood_mean": 60.0}
    assert tied_steps([], None) == {}


def test_the_table_lists_the_ties_and_their_median_over_seeds() -> None:
    columns = {column: title for _, column, title, _ in metrics()}
    assert columns["tied_steps"] == "Evaluations tied with the best step (1–32)"
    assert columns["tied_ood_mean"] == "Mean 33–48 over them"
    assert "tied_ood_mean" in SEED_COLUMNS
