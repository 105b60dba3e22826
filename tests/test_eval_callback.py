"""Addition evaluation during training: the best-step rule, the evaluation schedule, evals.csv, the best
weights, the run's final metrics, resume, and the fast free-running decoder against its slow twin."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest
import torch
from lightning.pytorch.callbacks import Callback
from torch import nn
from typer.testing import CliRunner

from falcon_lab.cli import app
from falcon_lab.config import ConfigError, load_config
from falcon_lab.eval.addition import evaluate_addition, greedy
from falcon_lab.eval.callback import (
    COLUMNS,
    AdditionEvaluation,
    evals_columns,
    pick_best,
    read_evals,
)
from falcon_lab.eval.free_running import free_running_accuracy, greedy_correct
from falcon_lab.eval.training import evaluation_callbacks
from falcon_lab.runs import Registry, RunDir
from falcon_lab.train import run_training
from falcon_lab.tasks.addition import EOS, VOCAB_SIZE, decode, encode, generate_records
from falcon_lab.tasks.addition.vocab import EQUALS
from tests.train_util import StopAt

# Training with the evaluations its configuration asks for, as `lab train` runs it.
train = partial(run_training, evaluations=evaluation_callbacks)

# A fast mixer, few rows, evaluations at 5, 10 and the last step 12.
SETTINGS = ["train.max_steps=12", "train.val_every=5", "train.ckpt_every=5", "train.batch_size=8",
            "train.log_every=1", "eval.n_per_length=2", "eval.free_per_length=1"]


def config(*overrides: str):
    return load_config("addition-tiny", mixer="transformer", overrides=[*SETTINGS, *overrides])


def rows(*pairs: tuple[int, float | None]) -> list[dict]:
    return [{"step": s, "val_acc": v} for s, v in pairs]


@pytest.mark.parametrize(("evals", "best"), [
    (rows((100, 50.0), (200, 80.0), (300, 80.0), (400, 70.0)), 200),   # a tie: the earlier step
    (rows((400, 90.0), (300, 90.0), (200, 10.0), (100, 90.0)), 100),   # order of the rows does not matter
    (rows((100, 0.0), (200, 0.0), (300, 0.0)), 100),
    (rows((100, None), (200, 1.0), (300, 0.5)), 200),                  # rows without the key are passed over
    (rows((100, 99.9), (200, 100.0), (300, 99.99)), 200),
])
def test_best_step_is_the_highest_validation_accuracy_earliest_among_ties(evals: list[dict], best: int) -> None:
    assert pick_best(evals)["step"] == best


def test_ties_can_go_to_the_lowest_validation_loss() -> None:
    evals = [{"step": 100, "val_acc": 100.0, "val_loss": 0.03}, {"step": 200, "val_acc": 100.0, "val_loss": 0.01},
             {"step": 300, "val_acc": 99.0, "val_loss": 0.001},  # a lower loss, a lower accuracy: not a tie
             {"step": 400, "val_acc": 100.0, "val_loss": 0.01},  # equal losses: the earlier
             {"step": 500, "val_acc": 100.0}]                    # no loss kept: never chosen over one
    assert pick_best(evals)["step"] == 100
    assert pick_best(evals, ties="val_loss")["step"] == 200
    assert pick_best([{"step": 1, "val_acc": 5.0}, {"step": 2, "val_acc": 5.0}], ties="val_loss")["step"] == 1
    with pytest.raises(ValueError, match="ties='latest' is not accepted; accepted: earliest, val_loss"):
        pick_best(evals, ties="latest")
    with pytest.raises(ConfigError, match="eval.best_ties='latest' is not accepted"):
        config("eval.best_ties=latest")
    # a configuration that leaves the rule at its default keeps the run id it had before the option existed
    from falcon_lab.config import config_hash
    assert config_hash(config("eval.best_ties=earliest")) == config_hash(config())
    assert config_hash(config("eval.best_ties=val_loss")) != config_hash(config())


def test_no_rows_no_best() -> None:
    assert pick_best([]) is None and pick_best(rows((100, None))) is None


def test_only_enabled_addition_runs_get_the_callback(tmp_path: Path) -> None:
    assert evaluation_callbacks(load_config("tiny"), RunDir(tmp_path)) == []
    (callback,) = evaluation_callbacks(config(), RunDir(tmp_path))
    assert isinstance(callback, AdditionEvaluation)
    assert (callback.every, callback.n_per_length, callback.free_per_length) == (5, 2, 1)


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """One uninterrupted 12-step run with evaluation."""
    root = tmp_path_factory.mktemp("evaluated")
    result = train(config(), out=root / "run", results=root, progress=False)
    assert result.status == "finished"
    return root, result.metrics


def test_evaluations_run_on_schedule_and_write_every_width(finished: tuple[Path, dict]) -> None:
    root, _ = finished
    path = root / "run" / "evals.csv"
    assert path.read_text().splitlines()[0] == ",".join(COLUMNS)
    evals = read_evals(path)
    assert [e["step"] for e in evals] == [5, 10, 12]
    for e in evals:
        assert set(e["teacher_forced"]) == set(e["per_token"]) == set(range(1, 49))
        assert all(0.0 <= v <= 100.0 for v in e["teacher_forced"].values())
        assert e["val_acc"] == pytest.approx(sum(e["teacher_forced"][n] for n in range(1, 33)) / 32)
        assert e["ood_mean"] == pytest.approx(sum(e["teacher_forced"][n] for n in range(33, 49)) / 16)
        assert e["acc@33"] == e["teacher_forced"][33] and e["acc@48"] == e["teacher_forced"][48]
        assert 0.0 < e["val_loss"] < 20.0  # mean cross-entropy (nats) of the answer tokens of widths 1-32


def test_a_run_evaluates_the_widths_its_configuration_names(tmp_path: Path) -> None:
    # widths 1-6, held out from 4: evals.csv, the metrics and positions.csv hold those widths and no other
    cfg = config("train.max_steps=5", "eval.widths=[1,6]", "eval.held_out_from=4")
    result = train(cfg, out=tmp_path / "run", results=tmp_path, progress=False)
    assert result.status == "finished"
    path = tmp_path / "run" / "evals.csv"
    assert path.read_text().splitlines()[0] == ",".join(evals_columns(range(1, 7), range(4, 7)))
    (last,) = read_evals(path)
    assert set(last["teacher_forced"]) == set(last["free_running"]) == set(range(1, 7))
    assert last["val_acc"] == pytest.approx(sum(last["teacher_forced"][n] for n in range(1, 4)) / 3)
    assert last["ood_mean"] == pytest.approx(sum(last["teacher_forced"][n] for n in range(4, 7)) / 3)
    assert last["acc@4"] == last["teacher_forced"][4] and last["acc@6"] == last["teacher_forced"][6]
    assert result.metrics["best_acc@6"] == last["acc@6"] and "best_acc@33" not in result.metrics
    positions = (tmp_path / "run" / "positions.csv").read_text().splitlines()
    assert {int(line.split(",")[4]) for line in positions[1:]} == set(range(1, 7))


def test_final_metrics_are_the_best_and_the_last_evaluation(finished: tuple[Path, dict]) -> None:
    root, metrics = finished
    evals = read_evals(root / "run" / "evals.csv")
    best = pick_best(evals)
    assert metrics["best_step"] == best["step"] and metrics["last_step"] == 12
    for key in ("val_acc", "ood_mean", "acc@33", "acc@48", "val_token_acc", "ood_token_mean"):
        assert metrics[f"best_{key}"] == pytest.approx(best[key])
        assert metrics[f"last_{key}"] == pytest.approx(evals[-1][key])
    # Free-running accuracy is measured for the best and the last weights only.
    measured = [e["step"] for e in evals if "free_running" in e]
    assert measured == sorted({best["step"], 12})
    assert set(evals[-1]["free_running"]) == set(range(1, 49))
    assert "best_free_val_acc" in metrics and "last_free_ood_mean" in metrics
    (row,) = [r for r in Registry(root / "lab.db").rows()]
    assert json.loads(row["metrics"])["best_step"] == best["step"]


def test_best_weights_reproduce_the_best_evaluation(finished: tuple[Path, dict]) -> None:
    from falcon_lab.mixers import LanguageModel

    from falcon_lab.train.module import lm_config

    root, metrics = finished
    saved = torch.load(root / "run" / "checkpoints" / "best.pt", map_location="cpu", weights_only=True)
    assert saved["step"] == metrics["best_step"]
    model = LanguageModel(lm_config(config()))
    model.load_state_dict(saved["state_dict"])
    best = pick_best(read_evals(root / "run" / "evals.csv"))
    again = evaluate_addition(model, n_per_length=2, val_widths=range(1, 9), ood_widths=range(0))
    assert again.per_token == pytest.approx({n: best["per_token"][n] for n in range(1, 9)}, abs=1e-9)


def test_lab_eval_addition_prints_the_runs_table_row(finished: tuple[Path, dict]) -> None:
    root, metrics = finished
    result = CliRunner().invoke(app, ["eval", "addition", "--run", str(root / "run"), "--per-n", "2",
                                      "--free-per-n", "1"])
    assert result.exit_code == 0, result.output
    title, header, _, row = result.output.strip().splitlines()
    assert f"best weights: best.pt, step {metrics['best_step']:.0f}" in title
    cells = dict(zip(header.strip("| ").split(" | "), row.strip("| ").split(" | ")))
    assert cells["Mixer"] == "transformer" and cells["Step"] == f"{metrics['best_step']:.0f}"
    for title, key in (("Val. acc. 1–32", "best_val_acc"), ("Per-token mean 33–48", "best_ood_token_mean"),
                       ("Free-running val. acc. 1–32", "best_free_val_acc")):
        assert cells[title] == f"{metrics[key]:.1f}"
    last = CliRunner().invoke(app, ["eval", "addition", "--run", str(root / "run"), "--which", "last", "--per-n", "2",
                                    "--free-per-n", "0"])
    assert last.exit_code == 0 and "| transformer | 12 |" in last.output


def test_a_finished_run_writes_the_accuracy_of_every_answer_position(finished: tuple[Path, dict],
                                                                     tmp_path: Path) -> None:
    import pandas as pd

    root, metrics = finished
    frame = pd.read_csv(root / "run" / "positions.csv")
    assert sorted(set(frame["which"])) == ["best", "last"]
    best, last = frame[frame["which"] == "best"], frame[frame["which"] == "last"]
    assert set(best["step"]) == {metrics["best_step"]} and set(last["step"]) == {12}
    assert len(best) == len(last) == sum(n + 2 for n in range(1, 49))
    # the per-position numbers agree with the per-token accuracy of the same evaluation
    evals = {e["step"]: e for e in read_evals(root / "run" / "evals.csv")}
    for n in (1, 5, 40):
        tokens = best[best["width"] == n]["accuracy"].mean()
        assert tokens == pytest.approx(evals[metrics["best_step"]]["per_token"][n], abs=1e-6)
    result = CliRunner().invoke(app, ["plot", "positions", "--csv", str(root / "run" / "positions.csv"),
                                      "--out", str(tmp_path)])
    assert result.exit_code == 0 and (tmp_path / "positions.png").is_file()


def test_lab_eval_addition_writes_every_answer_position_and_lab_plot_draws_it(finished: tuple[Path, dict],
                                                                             tmp_path: Path) -> None:
    import pandas as pd
    from PIL import Image

    root, metrics = finished
    csv = tmp_path / "positions.csv"
    result = CliRunner().invoke(app, ["eval", "addition", "--run", str(root / "run"), "--per-n", "2",
                                      "--free-per-n", "0", "--positions", str(csv)])
    assert result.exit_code == 0, result.output
    assert result.output.strip().splitlines()[-1] == f"positions: {csv}"
    frame = pd.read_csv(csv)
    assert list(frame.columns) == ["run", "which", "step", "samples", "width", "position", "token", "accuracy"]
    assert len(frame) == sum(n + 2 for n in range(1, 49)) and set(frame["step"]) == {metrics["best_step"]}
    assert frame["accuracy"].between(0, 100).all()
    result = CliRunner().invoke(app, ["plot", "positions", "--csv", str(csv), "--train-widths", "1-8"])
    assert result.exit_code == 0, result.output
    image = Image.open(tmp_path / "positions.png")
    assert image.text["Source"] == csv.as_posix() and "--train-widths 1-8" in image.text["Description"]
    frame.loc[3, "position"] = 9  # a position past its width's answer: one line naming the file
    frame.to_csv(csv, index=False)
    result = CliRunner().invoke(app, ["plot", "positions", "--csv", str(csv)])
    assert result.exit_code == 2 and result.output.count("\n") == 1
    assert result.output.startswith(f"lab plot: {csv}: position 9 does not lie in a width-2 answer")


@pytest.mark.parametrize(("args", "message"), [
    (["--run", "."], "lab eval: "),
    (["--which", "worst"], "lab eval: --which 'worst' is not accepted; accepted: best, last"),
])
def test_lab_eval_addition_mistakes_are_one_line(args: list[str], message: str, finished: tuple[Path, dict]) -> None:
    root, _ = finished
    result = CliRunner().invoke(app, ["eval", "addition", "--run", str(root / "run"), *args])
    assert result.exit_code == 2 and result.output.count("\n") == 1 and result.output.startswith(message)


def test_a_resumed_run_evaluates_as_an_uninterrupted_one(finished: tuple[Path, dict], tmp_path: Path) -> None:
    root, metrics = finished
    # Stopped at step 5: its checkpoint was written before step 5's evaluation, which must be redone.
    first = train(config(), out=tmp_path / "run", results=tmp_path, callbacks=[StopAt(5)], progress=False)
    assert first.status == "stopped"
    resumed = train(config(), out=tmp_path / "run", results=tmp_path, progress=False)
    assert resumed.status == "finished" and resumed.resumed_from == 5
    a, b = read_evals(tmp_path / "run" / "evals.csv"), read_evals(root / "run" / "evals.csv")
    assert [e["step"] for e in a] == [5, 10, 12]
    for x, y in zip(a, b):
        assert x["per_token"] == pytest.approx(y["per_token"], abs=1e-6)
    assert resumed.metrics["best_step"] == metrics["best_step"]


class KillAt(Callback):
    """Ends the process's run at `step` after its checkpoint was written and before its evaluation ran,
    as a SIGKILL during the final evaluation does."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            raise RuntimeError("killed")


def test_a_run_killed_in_its_final_evaluation_completes_it_on_resume(finished: tuple[Path, dict],
                                                                     tmp_path: Path) -> None:
    root, metrics = finished
    cfg = config("train.ckpt_every=4")  # a checkpoint at the last step, written before its evaluation
    with pytest.raises(RuntimeError, match="killed"):
        train(cfg, out=tmp_path / "run", results=tmp_path, callbacks=[KillAt(12)], progress=False)
    assert [e["step"] for e in read_evals(tmp_path / "run" / "evals.csv")] == [5, 10]
    assert not (tmp_path / "run" / "positions.csv").exists()
    resumed = train(cfg, out=tmp_path / "run", results=tmp_path, progress=False)
    assert resumed.status == "finished" and resumed.resumed_from == 12
    a, b = read_evals(tmp_path / "run" / "evals.csv"), read_evals(root / "run" / "evals.csv")
    assert [e["step"] for e in a] == [5, 10, 12]
    assert a[-1]["per_token"] == pytest.approx(b[-1]["per_token"], abs=1e-6)
    assert "free_val_acc" in a[-1] and a[-1]["free_running"] == b[-1]["free_running"]
    assert (tmp_path / "run" / "positions.csv").read_text().splitlines()[0] == \
        (root / "run" / "positions.csv").read_text().splitlines()[0]
    assert resumed.metrics["last_step"] == 12 and resumed.metrics["best_step"] == metrics["best_step"]
    # Completed once: another call finds the run finished and leaves it alone.
    assert train(cfg, out=tmp_path / "run", results=tmp_path, progress=False).status == "skipped"


class Adder(nn.Module):
    """Puts all logit mass on the right next token; from width `drop_carry_from` on it loses the final
    carry, so those widths score exactly the share of samples without one."""

    def __init__(self, drop_carry_from: int = 99) -> None:
        super().__init__()
        self.anchor = nn.Parameter(torch.zeros(1))
        self.drop_carry_from = drop_carry_from

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        logits = torch.full((*input_ids.shape, VOCAB_SIZE), -1e4)
        for row, ids in enumerate(input_ids.tolist()):
            eq = ids.index(EQUALS)
            a, b = decode(ids[:eq]).split("+")
            total = int(a) + int(b)
            if len(a) >= self.drop_carry_from:
                total %= 10 ** len(a)
            want = encode(str(total).zfill(len(a) + 1)[::-1]) + [EOS]
            for j, token in enumerate(want):
                if eq + j < len(ids):
                    logits[row, eq + j, token] = 0.0
        return logits


@pytest.mark.parametrize("n", [1, 6, 35])
def test_fast_free_running_matches_its_slow_twin(n: int) -> None:
    records = list(generate_records("ood" if n > 32 else "val", (n, n), 12, seed=3))
    for model in (Adder(), Adder(drop_carry_from=1)):
        fast = greedy_correct(model, records, torch.device("cpu"))
        assert torch.equal(fast, greedy(model, records, torch.device("cpu")))
    assert greedy_correct(Adder(), records, torch.device("cpu")).all()
    assert not greedy_correct(Adder(drop_carry_from=1), records, torch.device("cpu")).all()


def test_free_running_accuracy_uses_the_evaluation_samples() -> None:
    model = Adder(drop_carry_from=44)
    fast = free_running_accuracy(model, n_per_length=3, seed=1, val_widths=range(30, 33), ood_widths=range(42, 49))
    slow = evaluate_addition(model, n_per_length=3, seed=1, free_running=True, val_widths=range(30, 33),
                             ood_widths=range(42, 49))
    assert fast == slow.free_running
    assert fast[42] == 100.0 and min(fast.values()) < 100.0
    with pytest.raises(ValueError, match="n_per_length must be >= 1"):
        free_running_accuracy(model, n_per_length=0)


def test_time_spent_evaluating_is_counted_apart_from_the_steps(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    import falcon_lab.eval.callback as callback_module
    from falcon_lab.train.callbacks import read_metrics

    pause = 2.0  # long beside a tiny step even on a loaded machine: the comparisons below leave it half as margin

    def slow_evaluation(*args, **kwargs):
        time.sleep(pause)
        return evaluate_addition(*args, **kwargs)

    monkeypatch.setattr(callback_module, "evaluate_addition", slow_evaluation)
    cfg = config("train.max_steps=8", "train.val_every=4", "train.ckpt_every=4", "eval.free_per_length=0")
    assert train(cfg, out=tmp_path / "run", results=tmp_path, progress=False).status == "finished"
    metrics = {r["step"]: r for r in read_metrics(tmp_path / "run" / "metrics.csv")}
    assert metrics[3]["eval_s"] == 0.0  # nothing evaluated yet
    # the evaluation after step 4 (and Lightning's validation there) falls in the row of step 5
    assert metrics[4]["eval_s"] == 0.0 and metrics[5]["eval_s"] >= pause
    assert all(metrics[s]["eval_s"] <= metrics[s + 1]["eval_s"] for s in range(1, 8))
    # the step after an evaluation costs no more than the others once the evaluation is taken out
    stepping = {s: metrics[s]["elapsed_s"] - metrics[s]["eval_s"] for s in range(1, 9)}
    assert stepping[5] - stepping[4] < pause / 2 and metrics[5]["elapsed_s"] - metrics[4]["elapsed_s"] >= pause
    # tokens/s leaves the evaluation out (with it the rate of step 5 would be under a step's tokens / pause)
    assert metrics[5]["tokens_per_s"] > (metrics[5]["tokens"] - metrics[4]["tokens"]) / pause


def test_training_asked_to_evaluate_without_evaluations_says_so(tmp_path: Path) -> None:
    # training imports nothing of falcon_lab.eval: the caller passes the evaluations in, and a run that asks for
    # them without them is refused before anything is written
    with pytest.raises(ConfigError, match="evaluation_callbacks"):
        run_training(config(), out=tmp_path / "run", results=tmp_path, progress=False)
    assert not (tmp_path / "run").exists()
