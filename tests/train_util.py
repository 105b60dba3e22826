"""Helpers for the training tests."""

from lightning.pytorch.callbacks import Callback


class StopAt(Callback):
    """Stop a run after its step `step`, as a signal would: a checkpoint there, status `stopped`."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            trainer.should_stop = True
