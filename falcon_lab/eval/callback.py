"""Addition evaluation during training (paper §5.2): the numbers of the paper's Table 3, as a run goes.

Every `train.val_every` steps and at the last step, rank zero measures teacher-forced whole-suffix
and per-token accuracy on widths 1–48 (`eval.widths`; `eval.n_per_length` samples per width) and appends
a row to the run's `evals.csv`: the summary columns, then the accuracy of every width (`tf@n`, `tok@n`, and
`free@n` where measured). The best step is the one with the highest validation accuracy (widths
1–32, those before `eval.held_out_from`); among equal accuracies the earliest step wins, the first to reach it (or,
with `eval.best_ties=val_loss`, the one of lowest teacher-forced loss on those widths). Its weights are kept
(in the callback's checkpoint state and in `checkpoints/best.pt`), and at the last step free-running
greedy accuracy is measured for the best and the last weights (`eval.free_per_length` samples per
width), and so is the accuracy of every answer position of every width (`positions.csv`, both
weights). The run's final metrics gain the best evaluation's columns (`best_*`) and the last one's
(`last_*`). With `train.ema` every evaluation reads the weights' moving average, and the trained weights
themselves are scored beside it at each evaluation in `evals_raw.csv` (the same columns; nothing is chosen by it).
"""

from __future__ import annotations

import copy
import csv
import io
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback

from falcon_lab.compact import open_text, readable
from falcon_lab.config import BEST_TIES, RunConfig
from falcon_lab.eval.addition import evaluate_addition, position_accuracy, position_rows, split_widths, summarise_widths
from falcon_lab.eval.free_running import free_running_accuracy
from falcon_lab.runs import RunDir, atomic_write_text
from falcon_lab.train.checkpoint_io import AtomicCheckpointIO
from falcon_lab.train.clock import add_eval_time

FREE_SUMMARY = ("free_val_acc", "free_ood_mean")
WIDTHS = range(1, 49)  # the paper's evaluation widths, held out from 33 on (eval.widths, eval.held_out_from)
# Per-width columns of evals.csv and the row key holding each family of accuracies.
PER_WIDTH = {"tf": "teacher_forced", "tok": "per_token", "free": "free_running"}


def summary_keys(held_out: range = range(33, 49)) -> tuple[str, ...]:
    """The summary columns of an evaluation whose held-out widths are `held_out`: val_acc, ood_mean, the
    accuracy at the first and the last held-out width (acc@33, acc@48 for the paper's), per-token val_acc
    and ood_mean, and the teacher-forced loss on the validation widths (val_loss; absent from the evals.csv
    files written before it was kept)."""
    return ("val_acc", "ood_mean", f"acc@{held_out.start}", f"acc@{held_out.stop - 1}", "val_token_acc",
            "ood_token_mean", "val_loss")


def eval_widths(cfg: RunConfig) -> tuple[range, range]:
    """A run's validation widths and held-out widths (`eval.widths`, `eval.held_out_from`)."""
    return split_widths(cfg.eval.widths, cfg.eval.held_out_from)


def evals_columns(widths: range = WIDTHS, held_out: range = range(33, 49)) -> tuple[str, ...]:
    """evals.csv's columns for an evaluation of `widths` holding out `held_out`."""
    return ("step", *summary_keys(held_out), *FREE_SUMMARY, *(f"{p}@{n}" for p in PER_WIDTH for n in widths))


SUMMARY = summary_keys()
# The columns of an addition evals.csv; write_evals adds one per further length its rows hold.
COLUMNS = evals_columns()


def pick_best(rows: Sequence[Mapping[str, Any]], key: str = "val_acc",
              ties: str = "earliest") -> Mapping[str, Any] | None:
    """The row with the highest `key`; among equals the earliest step (`ties="earliest"`) or the one of lowest
    `val_loss` (`ties="val_loss"`, `eval.best_ties`; rows without one count as the highest loss, and equal
    losses go to the earliest). None when no row has `key`."""
    if ties not in BEST_TIES:
        raise ValueError(f"ties={ties!r} is not accepted; accepted: {', '.join(BEST_TIES)}")
    best = None
    for row in sorted(rows, key=lambda r: r["step"]):
        if row.get(key) is None:
            continue
        if best is None or row[key] > best[key]:
            best = row
        elif ties == "val_loss" and row[key] == best[key] and _loss(row) < _loss(best):
            best = row
    return best


def _loss(row: Mapping[str, Any]) -> float:
    value = row.get("val_loss")
    return math.inf if value is None or math.isnan(value) else float(value)


def evals_path(run: RunDir) -> Path:
    """Where a run's evaluations are written."""
    return run.root / "evals.csv"


def positions_path(run: RunDir) -> Path:
    """The run's positions.csv: accuracy of every answer position at the best and the last step."""
    return run.root / "positions.csv"


def evaluated_model(pl_module: pl.LightningModule) -> torch.nn.Module:
    """The model an evaluation reads: the weights' moving average with `train.ema`, else the model."""
    pick = getattr(pl_module, "evaluated_model", None)
    return pick() if pick is not None else pl_module.model


def raw_evals_path(run: RunDir) -> Path:
    """With `train.ema`: the trained weights' own evaluations, beside evals.csv's of their average."""
    return run.root / "evals_raw.csv"


def best_weights_path(run: RunDir) -> Path:
    """Where a run's best weights are written: {"step", "state_dict" (the LanguageModel's), "metrics"}."""
    return run.checkpoints / "best.pt"


def _per_width_column(name: str) -> tuple[str, int] | None:
    """("teacher_forced", 7) for "tf@7"; None for a summary column (acc@33 among them)."""
    prefix, _, width = name.partition("@")
    return (PER_WIDTH[prefix], int(width)) if prefix in PER_WIDTH and width.isdigit() else None


def read_evals(path: str | Path) -> list[dict[str, Any]]:
    """Rows of an evals.csv: summary columns as floats and `teacher_forced`/`per_token`/`free_running`
    dicts of width (or sequence length) -> accuracy, for whatever widths the file holds; empty cells are
    absent."""
    path = readable(path)  # a finished run's record may keep it gzipped (falcon_lab.compact)
    if not path.exists():
        return []
    rows = []
    with open_text(path) as f:
        for raw in csv.DictReader(f):
            row: dict[str, Any] = {"step": int(raw["step"])}
            for key, value in raw.items():
                if key == "step" or value in ("", None):
                    continue
                per_width = _per_width_column(key)
                if per_width is None:
                    row[key] = float(value)
                else:
                    row.setdefault(per_width[0], {})[per_width[1]] = float(value)
            rows.append(row)
    return rows


def write_evals(path: str | Path, rows: Sequence[Mapping[str, Any]], widths: range = WIDTHS,
                held_out: range = range(33, 49)) -> None:
    """Write rows (as `read_evals` returns them) of an evaluation of `widths` holding out `held_out` to an
    evals.csv, atomically: a column per width evaluated and per any other length the rows hold (the synthetic
    tasks' sequence lengths)."""
    lengths = sorted({*widths, *(n for row in rows for name in PER_WIDTH.values() for n in row.get(name, {}))})
    columns = evals_columns(range(0), held_out) + tuple(f"{p}@{n}" for p in PER_WIDTH for n in lengths)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        flat: dict[str, Any] = {k: row[k] for k in columns[:1 + len(SUMMARY) + len(FREE_SUMMARY)]
                                if row.get(k) is not None}
        for prefix, name in PER_WIDTH.items():
            flat.update({f"{prefix}@{n}": v for n, v in row.get(name, {}).items()})
        writer.writerow({k: (repr(v) if isinstance(v, float) else v) for k, v in flat.items()})
    atomic_write_text(path, out.getvalue())


class AdditionEvaluation(Callback):
    """Evaluates addition every `every` steps and at the last step (see the module docstring).

    Its state (the evaluations so far and the best weights) travels in the run's checkpoints, so a
    resumed run keeps its best step; a checkpoint written at an evaluation step, before that
    evaluation ran, is evaluated again when the run resumes from it.
    """

    def __init__(self, run: RunDir, every: int, n_per_length: int, free_per_length: int, seed: int = 0,
                 widths: tuple[int, int] = (1, 48), held_out_from: int = 33, ties: str = "earliest") -> None:
        if every < 1 or n_per_length < 1 or free_per_length < 0:
            raise ValueError(f"every and n_per_length must be >= 1 and free_per_length >= 0, got {every}, "
                             f"{n_per_length}, {free_per_length}")
        if ties not in BEST_TIES:
            raise ValueError(f"ties={ties!r} is not accepted; accepted: {', '.join(BEST_TIES)}")
        self.run, self.every, self.seed, self.ties = run, every, seed, ties
        self.widths = range(widths[0], widths[1] + 1)
        self.val_widths, self.ood_widths = split_widths(widths, held_out_from)
        self.summary_keys = summary_keys(self.ood_widths)
        self.n_per_length, self.free_per_length = n_per_length, free_per_length
        self.evals: list[dict[str, Any]] = []
        self.raw_evals: list[dict[str, Any]] = []  # with train.ema: the trained weights' own, evals_raw.csv
        self.best_weights: dict[str, torch.Tensor] | None = None

    def state_dict(self) -> dict[str, Any]:
        return {"evals": self.evals, "raw_evals": self.raw_evals, "best_weights": self.best_weights}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.evals = list(state_dict.get("evals", []))
        self.raw_evals = list(state_dict.get("raw_evals", []))
        self.best_weights = state_dict.get("best_weights")

    def best(self) -> Mapping[str, Any] | None:
        """The best evaluation so far."""
        return pick_best(self.evals, ties=self.ties)

    def run_metrics(self) -> dict[str, float]:
        """The best evaluation's columns (best_step, best_val_acc, ...) and the last one's (last_*)."""
        out: dict[str, float] = {}
        for prefix, row in (("best", self.best()), ("last", self.evals[-1] if self.evals else None)):
            if row is None:
                continue
            out[f"{prefix}_step"] = row["step"]
            out.update({f"{prefix}_{k}": row[k] for k in (*self.summary_keys, *FREE_SUMMARY)
                        if row.get(k) is not None})
        return out

    def _due(self, step: int, max_steps: int) -> bool:
        return step > 0 and (step % self.every == 0 or step == max_steps)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        start = trainer.global_step
        if start == 0:
            self.evals, self.raw_evals, self.best_weights = [], [], None
        self.evals = [e for e in self.evals if e["step"] <= start]
        self.raw_evals = [e for e in self.raw_evals if e["step"] <= start]
        if not trainer.is_global_zero:
            return
        if start:
            # best.pt may hold weights of steps after the checkpoint, which this run will redo.
            self._save_best()
        if self._due(start, trainer.max_steps) and all(e["step"] != start for e in self.evals):
            # The checkpoint of this step was saved before this step's evaluation ran.
            started = time.perf_counter()
            self._evaluate(trainer, pl_module, start)
            add_eval_time(pl_module, time.perf_counter() - started)
        self._write()

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        step = trainer.global_step
        if not trainer.is_global_zero or not self._due(step, trainer.max_steps):
            return
        started = time.perf_counter()
        try:
            self._at_step(trainer, pl_module, step)
        finally:
            add_eval_time(pl_module, time.perf_counter() - started)

    def _at_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, step: int) -> None:
        if all(e["step"] != step for e in self.evals):
            self._evaluate(trainer, pl_module, step)
        if step == trainer.max_steps and self.free_per_length:
            self._free_running(trainer, pl_module)
        if step == trainer.max_steps:
            self._positions(trainer, pl_module)
        self._write()

    def complete(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """After `trainer.fit`: the last step's evaluation, free-running accuracy and positions.csv, when a
        run resumed from a checkpoint of its last step that was written before they ran (a process killed
        during the final evaluation). The fit loop then runs no step and calls no training hook."""
        step = trainer.global_step
        if not trainer.is_global_zero or step != trainer.max_steps:
            return
        last = self.evals[-1] if self.evals else None
        evaluated = last is not None and last["step"] == step
        freed = evaluated and (not self.free_per_length or "free_val_acc" in last)
        if freed and readable(positions_path(self.run)).exists():
            return
        # Lightning's teardown has moved the model to the CPU; evaluate where it trained.
        pl_module.to(trainer.strategy.root_device)
        try:
            if not evaluated:
                self._evaluate(trainer, pl_module, step)
            if not freed and self.free_per_length:
                self._free_running(trainer, pl_module)
            self._positions(trainer, pl_module)
            self._write()
        finally:
            pl_module.cpu()

    def _write(self) -> None:
        write_evals(evals_path(self.run), self.evals, self.widths, self.ood_widths)
        if self.raw_evals:
            write_evals(raw_evals_path(self.run), self.raw_evals, self.widths, self.ood_widths)

    def _score(self, trainer: pl.Trainer, model: torch.nn.Module, step: int, device: torch.device) -> dict[str, Any]:
        with trainer.precision_plugin.val_step_context():
            report = evaluate_addition(model, n_per_length=self.n_per_length, seed=self.seed,
                                       val_widths=self.val_widths, ood_widths=self.ood_widths, device=device)
        summary = report.summary()
        return {"step": step, **{k: summary.get(k) for k in self.summary_keys},
                "teacher_forced": report.teacher_forced, "per_token": report.per_token}

    def _evaluate(self, trainer: pl.Trainer, pl_module: pl.LightningModule, step: int) -> None:
        model = evaluated_model(pl_module)
        row = self._score(trainer, model, step, pl_module.device)
        self.evals.append(row)
        if model is not pl_module.model:  # the weights' average is evaluated: score the trained weights beside it
            self.raw_evals = [e for e in self.raw_evals if e["step"] != step]
            self.raw_evals.append(self._score(trainer, pl_module.model, step, pl_module.device))
        if self.best() is row:
            self.best_weights = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
            self._save_best()

    def _best_model(self, pl_module: pl.LightningModule) -> torch.nn.Module | None:
        """A copy of the model holding the best weights, when the best step is not the last; else None."""
        last, best = self.evals[-1], self.best()
        if best is None or best is last or self.best_weights is None:
            return None
        model = copy.deepcopy(pl_module.model)
        model.load_state_dict(self.best_weights)
        return model

    def _free_running(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Free-running accuracy of the last weights and, when it is another step, the best weights."""
        last, best = self.evals[-1], self.best()
        self._measure_free(trainer, evaluated_model(pl_module), last, pl_module.device)
        model = self._best_model(pl_module)
        if model is not None and best is not None:
            self._measure_free(trainer, model, best, pl_module.device)
            del model
        self._save_best()

    def _positions(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Teacher-forced accuracy of every answer position of every width, for the last weights and the
        best ones: `positions.csv` in the run folder (`lab plot positions` draws it)."""
        import pandas as pd

        last, best = self.evals[-1], self.best() or self.evals[-1]
        model = self._best_model(pl_module)
        rows = []
        for which, row, weights in (("best", best, model or evaluated_model(pl_module)),
                                     ("last", last, evaluated_model(pl_module))):
            with trainer.precision_plugin.val_step_context():
                accuracy = position_accuracy(weights, widths=self.widths, n_per_length=self.n_per_length,
                                             seed=self.seed, device=pl_module.device,
                                             held_out_from=self.ood_widths.start)
            rows += position_rows(accuracy, run=self.run.root.name, which=which, step=row["step"],
                                  samples=self.n_per_length)
        del model
        atomic_write_text(positions_path(self.run), pd.DataFrame(rows).to_csv(index=False))

    def _measure_free(self, trainer: pl.Trainer, model: torch.nn.Module, row: dict[str, Any],
                      device: torch.device) -> None:
        with trainer.precision_plugin.val_step_context():
            per_n = free_running_accuracy(model, n_per_length=self.free_per_length, seed=self.seed,
                                          val_widths=self.val_widths, ood_widths=self.ood_widths, device=device)
        summary = summarise_widths(per_n, self.val_widths, self.ood_widths)
        row.update(free_running=per_n, free_val_acc=summary["val_acc"], free_ood_mean=summary["ood_mean"])

    def _save_best(self) -> None:
        best = self.best()
        if best is None or self.best_weights is None:
            return
        # Imported here: falcon_lab.train imports this module to attach it to runs.
        metrics = {k: best[k] for k in (*self.summary_keys, *FREE_SUMMARY) if best.get(k) is not None}
        AtomicCheckpointIO().save_checkpoint(
            {"step": best["step"], "state_dict": self.best_weights, "metrics": metrics},
            best_weights_path(self.run),
        )
