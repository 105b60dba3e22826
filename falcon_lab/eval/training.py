"""The evaluations a run makes while it trains, chosen by its configuration: the callbacks that a caller of
`falcon_lab.train.run_training` passes in (training itself knows nothing of evaluation)."""

from __future__ import annotations

from lightning.pytorch.callbacks import Callback

from falcon_lab.config import RunConfig
from falcon_lab.runs import RunDir
from falcon_lab.task import task_of


def evaluation_callbacks(cfg: RunConfig, run: RunDir) -> list[Callback]:
    """The evaluation callbacks a run's configuration asks for: its task's (``Task.evaluations``), none unless
    `eval.enabled`."""
    task = task_of(cfg.task)
    return task.evaluations(cfg, run) if cfg.eval.enabled and task.evaluates else []
