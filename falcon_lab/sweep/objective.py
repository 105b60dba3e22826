"""One trial: draw its parameters, train its `lab train` run in `trials/<n>/`, report each evaluation
for pruning, and return the objective.

The objective is read from the run's addition evaluation (falcon_lab.eval.callback): `val_acc` (widths 1-32, the
default) or `ood_mean` (mean accuracy on widths 33-48: tuning on the test widths, only when asked) at the
step with the best validation accuracy, or for `multi` that `val_acc` and the run's median tokens/s. A run that stops on a non-finite loss or
gradient is recorded as PRUNED (it ended early; its reported evaluations stand), with the cause in
the trial's `error` attribute.
"""

from __future__ import annotations

import contextlib
import math
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import optuna
from lightning.pytorch.callbacks import Callback

from falcon_lab.config import to_dict
from falcon_lab.eval.callback import AdditionEvaluation
from falcon_lab.sweep.space import Space, suggest
from falcon_lab.sweep.spec import FINAL_METRIC, STEP_METRIC, SweepSpec, trial_config
from falcon_lab.sweep.storage import worker_id


class ReportEvaluations(Callback):
    """Reports `key` of each addition evaluation to a single-objective trial as its intermediate value,
    and stops training when the pruner says so.

    The evaluation callback writes its row at the end of an evaluation step; this one reads new rows at
    the start of the next step (and at the end of training), so pruning costs at most one step.
    """

    def __init__(self, trial: optuna.Trial, key: str) -> None:
        self.trial, self.key = trial, key
        self.reported = 0
        self.pruned_at: int | None = None

    def _sync(self, trainer: pl.Trainer) -> None:
        evals = next((cb.evals for cb in trainer.callbacks if isinstance(cb, AdditionEvaluation)), [])
        for row in evals:
            if row["step"] <= self.reported or row.get(self.key) is None:
                continue
            self.reported = row["step"]
            self.trial.report(float(row[self.key]), row["step"])
            if self.pruned_at is None and row["step"] < trainer.max_steps and self.trial.should_prune():
                self.pruned_at = row["step"]
                trainer.should_stop = True

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        self._sync(trainer)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._sync(trainer)


def tokens_per_s(run_dir: Path) -> float:
    """The median training throughput over a run's logged rows (validation time excluded)."""
    from falcon_lab.train.callbacks import read_metrics

    rates = [r["tokens_per_s"] for r in read_metrics(run_dir / "metrics.csv") if "tokens_per_s" in r]
    return statistics.median(rates) if rates else math.nan


def _one_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}".splitlines()[0][:500]


class Objective:
    """The callable handed to `study.optimize`; `on_start()` runs as soon as the trial exists (the
    worker lets go of the budget lock there)."""

    def __init__(self, spec: SweepSpec, space: Space, on_start: Callable[[], None] = lambda: None) -> None:
        self.spec, self.space, self.on_start = spec, space, on_start

    def __call__(self, trial: optuna.Trial) -> float | tuple[float, float]:
        trial.set_user_attr("worker", worker_id())
        self.on_start()
        try:
            return self._run(trial)
        except optuna.TrialPruned:
            raise
        except BaseException as err:
            stopped = isinstance(err, (SystemExit, KeyboardInterrupt))
            with contextlib.suppress(Exception):
                trial.set_user_attr("error", f"stopped ({_one_line(err)})" if stopped else _one_line(err))
            if isinstance(err, SystemExit):
                # Lightning answers SIGTERM with SystemExit, which Optuna would let pass with the trial
                # still RUNNING; as KeyboardInterrupt the trial is told FAIL first.
                raise KeyboardInterrupt(str(err)) from err
            raise

    def _run(self, trial: optuna.Trial) -> float | tuple[float, float]:
        from falcon_lab.eval.training import evaluation_callbacks
        from falcon_lab.runs import device_name, git_state
        from falcon_lab.train import RunFailed, run_training

        spec = self.spec
        values = suggest(trial, self.space)
        cfg = trial_config(spec, self.space, values)
        run_dir = spec.trial_dir(trial.number)
        trial.set_user_attr("run_dir", str(run_dir))
        trial.set_user_attr("config", to_dict(cfg))
        trial.set_user_attr("device", device_name())
        trial.set_user_attr("commit", git_state()["commit"])
        print(f"trial {trial.number}: {values}  folder {run_dir}", flush=True)
        # Optuna takes intermediate values of single-objective studies only.
        report = [] if spec.objective == "multi" else [ReportEvaluations(trial, STEP_METRIC[spec.objective])]
        argv = [*spec.command, f"# trial {trial.number}"]
        try:
            result = run_training(cfg, out=run_dir, results=spec.results, callbacks=report, progress=False,
                                  argv=argv, evaluations=evaluation_callbacks)
        except RunFailed as err:
            trial.set_user_attr("error", _one_line(err))
            raise optuna.TrialPruned(f"diverged: {err}") from None
        trial.set_user_attr("steps", result.steps)
        throughput = tokens_per_s(result.run_dir)
        trial.set_user_attr("tokens_per_s", throughput)
        wanted = ("best_step", "best_val_acc", "best_ood_mean", "best_acc@33", "best_acc@48", "last_ood_mean")
        trial.set_user_attr("metrics", {k: result.metrics[k] for k in wanted if k in result.metrics})
        pruned_at = report[0].pruned_at if report else None
        if pruned_at is not None:
            raise optuna.TrialPruned(f"pruned after the evaluation at step {pruned_at}")
        if result.status != "finished":
            raise RuntimeError(f"run {result.run_id} ended at step {result.steps} of {cfg.train.max_steps} "
                               f"({result.status})")
        name = FINAL_METRIC[spec.objective]
        value = result.metrics.get(name)
        if value is None or not math.isfinite(value):
            raise RuntimeError(f"run {result.run_id} has no finite {name} (metrics: {sorted(result.metrics)})")
        if spec.objective == "multi":
            if not math.isfinite(throughput):
                raise RuntimeError(f"run {result.run_id} logged no tokens_per_s")
            return float(value), float(throughput)
        return float(value)
