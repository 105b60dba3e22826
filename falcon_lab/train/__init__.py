"""Training: the LightningModule, the Trainer factory, the data of a run, and `run_training`.

    from falcon_lab.config import load_config
    from falcon_lab.eval.training import evaluation_callbacks
    from falcon_lab.train import run_training
    result = run_training(load_config("tiny", mixer="transformer"), out="runs/try",
                          evaluations=evaluation_callbacks)

The caller passes the evaluations (`evaluations=`): training imports nothing of falcon_lab.eval.
"""

from falcon_lab.train.module import LabModule, NonFiniteError, lm_config
from falcon_lab.train.run import RunFailed, RunResult, run_training
from falcon_lab.train.trainer import make_trainer

__all__ = ["LabModule", "NonFiniteError", "RunFailed", "RunResult", "lm_config", "make_trainer", "run_training"]
