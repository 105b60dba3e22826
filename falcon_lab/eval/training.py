"""The evaluations a run makes while it trains, chosen by its configuration: the callbacks that a caller of
`falcon_lab.train.run_training` passes in (training itself knows nothing of evaluation)."""

from __future__ import annotations

from lightning.pytorch.callbacks import Callback

from falcon_lab.config import SEQUENCE_TASKS, RunConfig
from falcon_lab.eval.callback import AdditionEvaluation
from falcon_lab.eval.length_callback import LengthEvaluation
from falcon_lab.runs import RunDir


def evaluation_callbacks(cfg: RunConfig, run: RunDir) -> list[Callback]:
    """The evaluation callbacks a run's configuration asks for: none unless `eval.enabled`."""
    e = cfg.eval
    if cfg.task in SEQUENCE_TASKS and e.enabled:
        return [LengthEvaluation.of(cfg, run)]
    if not (cfg.task == "addition" and e.enabled):
        return []
    return [AdditionEvaluation(run, cfg.train.val_every, e.n_per_length, e.free_per_length, e.seed,
                               widths=e.widths, held_out_from=e.held_out_from, ties=e.best_ties)]
