"""Evaluation of the synthetic tasks during training: accuracy per length, as addition's per width.

Every `train.val_every` steps and at the last step, rank zero measures whole-sequence and per-token
accuracy at every train length and every held-out length (`falcon_lab.eval.lengths`, `eval.n_per_length`
samples per length) and appends a row to the run's `evals.csv`: the summary columns (`val_acc`,
`val_token_acc` over the train lengths; `ood_mean`, `ood_token_mean` over the held-out ones), then
`tf@n` (whole sequence) and `tok@n` (per token) for every length n. The best step is chosen in
distribution, as addition's: the highest `val_acc`, the earliest among equals; its weights go to
`checkpoints/best.pt`, and the run's metrics gain `best_*` and `last_*`. There is no free-running pass
(every target is scored under teacher forcing at once) and no positions.csv.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl

from falcon_lab.config import RunConfig
from falcon_lab.eval.callback import SUMMARY, AdditionEvaluation, evals_path, evaluated_model, write_evals
from falcon_lab.eval.lengths import evaluate_lengths
from falcon_lab.runs import RunDir
from falcon_lab.train.data import sequence_task
from falcon_lab.tasks.synthetic import SequenceTask


class LengthEvaluation(AdditionEvaluation):
    """Per-length evaluation of a synthetic task; the evaluations, best step, best weights, checkpoint
    state and resuming are addition's (`AdditionEvaluation`)."""

    def __init__(self, run: RunDir, every: int, n_per_length: int, task: SequenceTask,
                 train_lengths: tuple[int, int], test_lengths: tuple[int, int], seed: int = 0) -> None:
        super().__init__(run, every, n_per_length, free_per_length=0, seed=seed)
        self.task, self.train_lengths, self.test_lengths = task, tuple(train_lengths), tuple(test_lengths)

    @classmethod
    def of(cls, cfg: RunConfig, run: RunDir) -> LengthEvaluation:
        """The evaluation a run's configuration asks for."""
        return cls(run, cfg.train.val_every, cfg.eval.n_per_length, sequence_task(cfg), cfg.data.lengths,
                   cfg.data.test_lengths, cfg.eval.seed)

    def _evaluate(self, trainer: pl.Trainer, pl_module: pl.LightningModule, step: int) -> None:
        model = evaluated_model(pl_module)
        with trainer.precision_plugin.val_step_context():
            report = evaluate_lengths(model, self.task, train_lengths=self.train_lengths,
                                      test_lengths=self.test_lengths, n_per_length=self.n_per_length,
                                      seed=self.seed, device=pl_module.device)
        summary = report.summary()
        row: dict[str, Any] = {"step": step, **{k: summary.get(k) for k in SUMMARY},
                               "teacher_forced": report.teacher_forced, "per_token": report.per_token}
        self.evals.append(row)
        if self.best() is row:
            self.best_weights = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
            self._save_best()

    def _positions(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """No positions.csv: per-position accuracy is addition's (answer digits by significance)."""

    def complete(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """After `trainer.fit`: the last step's evaluation, when the run resumed from a checkpoint of its last
        step written before it ran."""
        step = trainer.global_step
        if not trainer.is_global_zero or step != trainer.max_steps:
            return
        if self.evals and self.evals[-1]["step"] == step:
            return
        pl_module.to(trainer.strategy.root_device)
        try:
            self._evaluate(trainer, pl_module, step)
            write_evals(evals_path(self.run), self.evals)
        finally:
            pl_module.cpu()
