"""Training: the LightningModule, the Trainer factory, the data of a run, and `run_training`.

    from lab.config import load_config
    from lab.eval.training import evaluation_callbacks
    from lab.train import run_training
    result = run_training(load_config("tiny", mixer="transformer"), out="runs/try",
                          evaluations=evaluation_callbacks)

The caller passes the evaluations (`evaluations=`): training imports nothing of lab.eval.
"""

from lab.train.module import LabModule, NonFiniteError, lm_config
from lab.train.run import RunFailed, RunResult, run_training
from lab.train.trainer import make_trainer

__all__ = ["LabModule", "NonFiniteError", "RunFailed", "RunResult", "lm_config", "make_trainer", "run_training"]
