"""Callbacks of a run: the metrics file, step checkpoints, and progress on a terminal or in a log."""

from __future__ import annotations

import contextlib
import csv
import io
import math
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback, RichProgressBar

from falcon_lab.compact import open_text, readable
from falcon_lab.console import say
from falcon_lab.runs import atomic_write_text
from falcon_lab.train.checkpoint_io import save_keeping_previous
from falcon_lab.train.clock import add_eval_time

COLUMNS = ("step", "loss", "lr", "grad_norm", "tokens_per_s", "tokens", "elapsed_s", "eval_s", "val_loss",
           "val_acc", "peak_gib")



def check_finite(pl_module: pl.LightningModule) -> None:
    """The module's non-finite check (LabModule.check_finite), where it has one."""
    check = getattr(pl_module, "check_finite", None)
    if check is not None:
        check()


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a metrics.csv (or its compacted metrics.csv.gz) as dicts of floats (step and tokens as ints); empty
    cells are absent."""
    path = readable(path)  # a finished run's record may keep it gzipped (falcon_lab.compact)
    if not path.exists():
        return []
    rows = []
    with open_text(path) as f:
        for raw in csv.DictReader(f):
            row: dict[str, Any] = {k: float(v) for k, v in raw.items() if k in COLUMNS and v not in ("", None)}
            row["step"] = int(row["step"])
            if "tokens" in row:  # a count: written back as it was read
                row["tokens"] = int(row["tokens"])
            rows.append(row)
    return rows


class MetricsLogger(Callback):
    """Writes `metrics.csv`: one row every `log_every` steps (step, loss, lr, grad_norm, tokens/s, ...)
    plus the validation metrics at each validation, and hands each row to the trainer's loggers.

    `loss` is the step's mean over every labelled token of the global batch, `lr` the base rate the
    step used, `grad_norm` the global norm before clipping, `tokens` the positions trained on so far
    (padding included, all ranks) and `tokens_per_s` their rate since the previous row, evaluation
    time excluded, `peak_gib` (CUDA only) the most memory the process's tensors have held on its device so
    far. `elapsed_s` is the wall time since the run's first step (over its resumes), `eval_s` the part of it
    spent evaluating: Lightning's validation and whatever a callback counts with `add_eval_time` (the addition
    evaluation); `elapsed_s - eval_s` is the time of the steps.

    The file is rewritten whole through a temporary file and os.replace, at every checkpoint step,
    after validation, at the end, and at most every `flush_seconds` in between, so a reader or a
    crash never sees half a line. Nothing is written before training starts (a run that fails to start leaves
    the file as it was). On resume the rows after the restored step are kept until the resumed run writes
    its own row of their step: the file is never shorter than before, and `tokens` continues from the
    restored step.
    """

    def __init__(self, path: str | Path, log_every: int, flush_every: int, flush_seconds: float = 15.0) -> None:
        self.path, self.log_every, self.flush_every = Path(path), log_every, flush_every
        self.flush_seconds = flush_seconds
        self.rows: list[dict[str, Any]] = []
        self.ahead: list[dict[str, Any]] = []  # rows of an earlier session past the restored step
        self.started = False
        self._t_log: float | None = None
        self._t_val = 0.0

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        start = trainer.global_step
        held = read_metrics(self.path)
        self.rows = [r for r in held if r["step"] <= start]
        self.ahead = [r for r in held if r["step"] > start]
        self.started = True
        last = next((r for r in reversed(self.rows) if "tokens" in r), {})
        self.tokens = int(last.get("tokens", 0))
        self._elapsed0 = float(last.get("elapsed_s", 0.0))
        self._eval0 = float(last.get("eval_s", 0.0))
        pl_module.eval_seconds = 0.0
        self._eval_log = 0.0
        self._t0 = self._t_log = self._t_flush = time.perf_counter()
        self._tokens_log = self.tokens
        self.flush(trainer)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        step = trainer.global_step
        self.tokens += batch[0].numel() * trainer.world_size
        if step % self.log_every == 0 or step == trainer.max_steps:
            check_finite(pl_module)  # a flagged step stops the run before its row is written
            now = time.perf_counter()
            evaluating = getattr(pl_module, "eval_seconds", 0.0)
            rate = (self.tokens - self._tokens_log) / max(now - self._t_log - (evaluating - self._eval_log), 1e-9)
            self._t_log, self._tokens_log, self._eval_log = now, self.tokens, evaluating
            self.add({
                "step": step, "loss": float(pl_module.last_loss), "lr": pl_module.last_lr,
                "grad_norm": float(pl_module.last_grad_norm), "tokens_per_s": rate, "tokens": self.tokens,
                "elapsed_s": self._elapsed0 + now - self._t0, "eval_s": self._eval0 + evaluating,
            })
            if pl_module.device.type == "cuda":  # the allocator's own count: no wait on the device
                self.rows[-1]["peak_gib"] = torch.cuda.max_memory_allocated(pl_module.device) / 2**30
            # for the progress bar or line, as host values: what goes through pl_module.log Lightning reads back
            # from the device at the end of every step after
            shown(pl_module).update({"loss": self.rows[-1]["loss"], "tok/s": rate})
            self.to_loggers(trainer, self.rows[-1])
        if step % self.flush_every == 0 or time.perf_counter() - self._t_flush > self.flush_seconds:
            self.flush(trainer)

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._t_val = time.perf_counter()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._t_log is not None and not trainer.sanity_checking:
            # Validation time is not training time: counted in eval_s, kept out of the next tokens/s.
            add_eval_time(pl_module, time.perf_counter() - self._t_val)
        if trainer.sanity_checking or not pl_module.val_metrics:
            return
        step = trainer.global_step
        if not self.rows or self.rows[-1]["step"] != step:
            self.add({"step": step})
        self.rows[-1].update(pl_module.val_metrics)
        self.to_loggers(trainer, {"step": step, **pl_module.val_metrics})
        self.flush(trainer)

    def add(self, row: dict[str, Any]) -> None:
        """Append a row, dropping the earlier session's rows up to its step (this session writes them again)."""
        while self.ahead and self.ahead[0]["step"] <= row["step"]:
            self.ahead.pop(0)
        self.rows.append(row)

    @staticmethod
    def to_loggers(trainer: pl.Trainer, row: dict[str, Any]) -> None:
        """Hand a row to the trainer's Lightning loggers (the CSV log, TensorBoard, W&B), rank zero only."""
        if not trainer.is_global_zero:
            return
        metrics = {k: float(v) for k, v in row.items() if k != "step"}
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=row["step"])

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.flush(trainer)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self.flush(trainer)

    def flush(self, trainer: pl.Trainer) -> None:
        """Rewrite the file atomically (rank zero only, once training has started)."""
        self._t_flush = time.perf_counter()
        if not trainer.is_global_zero or not self.started:
            return
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        for row in [*self.rows, *self.ahead]:
            writer.writerow({k: (repr(v) if isinstance(v, float) else v) for k, v in row.items()})
        atomic_write_text(self.path, out.getvalue())


class Phases(Callback):
    """When training started and ended (``time.perf_counter``), for the phases of a run's wall time that
    ``run_training`` writes to run.json (``timings``)."""

    def __init__(self) -> None:
        self.train_start: float | None = None
        self.train_end: float | None = None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.train_start = time.perf_counter()

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.train_end = time.perf_counter()


class StepCheckpoint(Callback):
    """Saves the whole training state to `path` every `every` optimiser steps, then calls `on_save(step)` on
    rank zero. The checkpoint it replaces becomes `previous` (when given), so two good ones are kept."""

    def __init__(self, path: str | Path, every: int, on_save: Callable[[int], None] | None = None,
                 previous: str | Path | None = None) -> None:
        self.path, self.every, self.on_save = Path(path), every, on_save
        self.previous = Path(previous) if previous is not None else None

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        step = trainer.global_step
        if step % self.every == 0:
            check_finite(pl_module)  # never replace the last good checkpoint with a flagged one
            if self.previous is None:
                trainer.save_checkpoint(self.path, weights_only=False)
            else:
                save_keeping_previous(trainer, self.path, self.previous)
            if self.on_save is not None and trainer.is_global_zero:
                self.on_save(step)


class StopOnInterrupt(Callback):
    """Ends training at the end of the step during which the process got SIGINT or SIGTERM, so that the
    run saves its checkpoint and metrics at that step and resumes exactly from it (status "stopped"):
    a time-limited job (`timeout`, a scheduler's SIGTERM) loses none of its steps. A second signal more
    than `grace` seconds after the first aborts at once, as Ctrl-C does without this callback; one
    arriving within `grace` (a launcher passing on the signal its process group already got) does not.

    The handlers are installed by `installed()` around `trainer.fit`, from the main thread only; Lightning's
    own SIGTERM handler (which would end the run at once, unsaved, as a clean exit) is replaced while the
    trainer runs. `signum` is the first signal received (None without one). In a DDP run every rank takes
    part in the decision each step, so all ranks stop at the same step.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, grace: float = 5.0) -> None:
        self.grace = grace
        self.requested_at: float | None = None
        self.signum: int | None = None
        self._held = False

    @contextlib.contextmanager
    def installed(self) -> Iterator[StopOnInterrupt]:
        """Holds the SIGINT and SIGTERM handlers for the duration of the block (a no-op outside the main thread)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {signum: signal.signal(signum, self.request) for signum in self.SIGNALS}
        self._held = True
        try:
            yield self
        finally:
            self._held = False
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _take_back(self) -> None:
        # Lightning installs its SIGTERM handler as each trainer stage starts and restores ours at its end.
        if self._held and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self.request)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._take_back()

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._take_back()

    def request(self, signum: int = signal.SIGINT, frame: object = None) -> None:
        """The signal handler: ask for a stop at the end of this step (or abort on a late repeat)."""
        now = time.monotonic()
        if self.requested_at is None:
            self.requested_at, self.signum = now, signum
            print(f"{signal.Signals(signum).name}: stopping after this step and saving a checkpoint (again to abort)",
                  file=sys.stderr, flush=True)
        elif now - self.requested_at > self.grace:
            raise KeyboardInterrupt(f"signal {signum}")

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        stop = self.requested_at is not None
        if trainer.world_size > 1:
            stop = trainer.strategy.reduce_boolean_decision(stop, all=False)
        if stop:
            trainer.should_stop = True


def shown(pl_module: pl.LightningModule) -> dict[str, float]:
    """The training figures the progress bar and line show (``LabModule.shown``; a module without one gets one)."""
    if not isinstance(getattr(pl_module, "shown", None), dict):
        pl_module.shown = {}
    return pl_module.shown


class StepProgressBar(RichProgressBar):
    """Rich progress over optimiser steps (not epochs) showing loss, tokens/s and validation.

    Its metrics (the loss, read from the device) are refreshed every `every` steps and after validation,
    not after every step: reading them waits for the GPU."""

    def __init__(self, every: int = 1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.every = every

    def _update_metrics(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        step = trainer.global_step
        if trainer.training and step % self.every and step != trainer.max_steps:
            return
        super()._update_metrics(trainer, pl_module)

    @property
    def total_train_batches(self) -> int | float:
        return self.trainer.max_steps

    def _get_train_description(self, current_epoch: int) -> str:
        # what trains: the mixer and task (LabModule.cfg), "train" for another module
        cfg = getattr(self.trainer.lightning_module, "cfg", None)
        return f"{cfg.mixer} on {cfg.task}" if cfg is not None else "train"

    def get_metrics(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> dict[str, Any]:
        metrics = {**shown(pl_module), **super().get_metrics(trainer, pl_module)}
        metrics.pop("v_num", None)
        return metrics


class LinePrinter(Callback):
    """Without a terminal: one line on stdout every `every` steps and at the end, after that step's
    validation when there is one."""

    def __init__(self, every: int) -> None:
        self.every = every
        self.latest: dict[str, Any] = {}

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        step = trainer.global_step
        # A validation follows at every val_check_batch and, from run_training, at the last step.
        validates = trainer.limit_val_batches != 0 and (step % trainer.val_check_batch == 0
                                                        or step == trainer.max_steps)
        if step == trainer.max_steps:
            self.latest.update({**shown(pl_module), **trainer.progress_bar_metrics})
        if (step % self.every == 0 or step == trainer.max_steps) and not validates:
            self.print(trainer, pl_module)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.print(trainer, pl_module)

    def print(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """One line: the step, the last logged loss and tokens/s, and the progress-bar metrics (rank zero only)."""
        if not trainer.is_global_zero:
            return
        # trainer.validate() after fit shows only validation metrics: keep the last training ones.
        self.latest.update({**shown(pl_module), **trainer.progress_bar_metrics})
        parts = [f"step {trainer.global_step}/{trainer.max_steps}"]
        parts += [f"{k} {v:.4g}" for k, v in self.latest.items() if isinstance(v, float) and math.isfinite(v)]
        say("  ".join(parts))
