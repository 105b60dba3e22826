"""The Lightning Trainer of a run: accelerator, precision, DDP, steps, validation, checkpoints, progress."""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import Logger
from lightning.pytorch.strategies import DDPStrategy, Strategy
from torch.nn import Module
from torch.nn.parallel import DistributedDataParallel

from falcon_lab.config import ConfigError, RunConfig, config_hash
from falcon_lab.task import task_of
from falcon_lab.runs import RunDir
from falcon_lab.train.callbacks import LinePrinter, MetricsLogger, StepCheckpoint, StepProgressBar
from falcon_lab.train.checkpoint_io import AtomicCheckpointIO


@contextlib.contextmanager
def without_known_warnings() -> Iterator[None]:
    """Fit and validate without the warnings a run of the lab raises and no setting of ours can avoid: Lightning
    (2.6) wraps each loader in a pytree leaf the way torch 2.13 deprecates; it counts the loader's workers as too
    few (the few it has are all the batches need: they are made from the step alone, falcon_lab.train.data); and
    torch's own inductor, imported by the first compiled step (train.compile), defines its modules with the
    torch.jit.script_method it deprecates. Held around the run's fit (falcon_lab.train.run), so that no caller
    (the command line, a campaign, a sweep, the tests) sees them, and every other warning still shows."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*treespec.*LeafSpec.*")
        warnings.filterwarnings("ignore", message=".*does not have many workers.*")
        warnings.filterwarnings("ignore", message=".*torch.jit.script_method.* is deprecated",
                                category=DeprecationWarning)
        yield


def resolve_accelerator(cfg: RunConfig) -> str:
    """"gpu" or "cpu": train.accelerator, with "auto" meaning a GPU when CUDA is available."""
    if cfg.train.accelerator == "auto":
        return "gpu" if torch.cuda.is_available() else "cpu"
    return cfg.train.accelerator


def resolve_precision(cfg: RunConfig, accelerator: str) -> str:
    """train.precision, with "auto" meaning bf16-mixed on a GPU and 32-true on a CPU."""
    if cfg.train.precision == "auto":
        return "bf16-mixed" if accelerator == "gpu" else "32-true"
    return cfg.train.precision


def resolve_strategy(cfg: RunConfig) -> str:
    """DDP whenever the run spans several processes (devices × nodes > 1), unless another is set."""
    if cfg.train.devices * cfg.train.num_nodes > 1:
        return "ddp" if cfg.train.strategy == "auto" else cfg.train.strategy
    return "auto"


class CurrentStreamDDP(DDPStrategy):
    """Lightning's DDP, with the model wrapped on the stream the steps run on.

    Lightning (2.6) builds DistributedDataParallel under a fresh side stream, which whole-network CUDA graph
    capture needs; DDP then keeps each parameter's AccumulateGrad node from that stream, and every backward
    on the default stream warns of the mismatch (and may synchronise across streams). This project's CUDA
    graphs are for one process only (`train.cuda_graphs` refuses several), so a DDP run has no use for the
    side stream."""

    def _setup_model(self, model: Module) -> DistributedDataParallel:
        return DistributedDataParallel(module=model, device_ids=self.determine_ddp_device_ids(),
                                       **self._ddp_kwargs)


def make_strategy(cfg: RunConfig) -> str | Strategy:
    """resolve_strategy's choice, its DDP ones ("ddp", "ddp_find_unused_parameters_true") as CurrentStreamDDP."""
    name = resolve_strategy(cfg)
    if name == "ddp":
        return CurrentStreamDDP()
    if name == "ddp_find_unused_parameters_true":
        return CurrentStreamDDP(find_unused_parameters=True)
    return name


# The package each logger of train.logger needs beyond Lightning, and how to install it.
LOGGER_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb"}


def check_logger(cfg: RunConfig) -> None:
    """ConfigError naming the package when train.logger needs one that is not installed."""
    import importlib.util

    package = LOGGER_PACKAGES.get(cfg.train.logger)
    if package is not None and importlib.util.find_spec(package) is None:
        raise ConfigError(f"train.logger={cfg.train.logger} needs the package {package}, which is not installed: "
                          f"pip install {package} (or pip install -e '.[{package}]'); or train.logger=csv")


def make_loggers(cfg: RunConfig, run: RunDir) -> list[Logger]:
    """The Lightning loggers of a run, under `<run>/logs/`: Lightning's CSV log (`csv/version_<n>/`, one
    version a session, so a resumed run keeps the earlier ones), and TensorBoard's (`tensorboard/`, one log
    across resumes) or W&B's (the run id as its id and name, resumed with the run; project $WANDB_PROJECT,
    else falcon-lab) when train.logger asks. MetricsLogger feeds them the rows of metrics.csv."""
    from lightning.pytorch.loggers import CSVLogger

    check_logger(cfg)
    logs = run.root / "logs"
    loggers: list[Logger] = [CSVLogger(logs, name="csv")]
    if cfg.train.logger == "tensorboard":
        from lightning.pytorch.loggers import TensorBoardLogger

        loggers.append(TensorBoardLogger(logs, name="tensorboard", version="", default_hp_metric=False))
    elif cfg.train.logger == "wandb":
        import os

        from lightning.pytorch.loggers import WandbLogger

        run_id = config_hash(cfg)
        loggers.append(WandbLogger(name=run_id, id=run_id, resume="allow", save_dir=str(logs),
                                   project=os.environ.get("WANDB_PROJECT", "falcon-lab")))
    return loggers


def has_validation(cfg: RunConfig) -> bool:
    """Whether the task has a validation set (random tokens have nothing to validate)."""
    return task_of(cfg.task).validates


def make_trainer(
    cfg: RunConfig,
    run: RunDir,
    callbacks: Sequence[Callback] = (),
    progress: bool | None = None,
    on_checkpoint: Callable[[int], None] | None = None,
) -> pl.Trainer:
    """A Trainer that runs `train.max_steps` optimiser steps, validates every `train.val_every`,
    writes `run.metrics` (and the loggers of `make_loggers`) and checkpoints `run.last_checkpoint` every
    `train.ckpt_every` (atomically, the one before kept as `run.previous_checkpoint`).

    `progress`: a rich progress bar (True), one printed line per validation interval (False), or
    the bar only when stdout is a terminal (None). `on_checkpoint(step)` runs on rank zero after
    each checkpoint.
    """
    t = cfg.train
    accelerator = resolve_accelerator(cfg)
    if accelerator == "gpu":
        torch.set_float32_matmul_precision("high")
    if t.deterministic:
        # cuBLAS picks reduction orders by workspace unless told one; set before the first GEMM of the run
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    if progress is None:
        progress = sys.stdout.isatty()
    ours: list[Callback] = [
        MetricsLogger(run.metrics, t.log_every, flush_every=t.ckpt_every),
        StepCheckpoint(run.last_checkpoint, t.ckpt_every, on_checkpoint, previous=run.previous_checkpoint),
        StepProgressBar(t.log_every) if progress else LinePrinter(t.val_every),
    ]
    validate = has_validation(cfg)
    return pl.Trainer(
        accelerator=accelerator,
        devices=t.devices,
        num_nodes=t.num_nodes,
        strategy=make_strategy(cfg),
        precision=resolve_precision(cfg, accelerator),
        plugins=[AtomicCheckpointIO()],
        max_steps=t.max_steps,
        max_epochs=-1,
        val_check_interval=t.val_every if validate else None,
        check_val_every_n_epoch=None,
        limit_val_batches=None if validate else 0,
        num_sanity_val_steps=0,
        callbacks=[*ours, *callbacks],
        logger=make_loggers(cfg, run),
        log_every_n_steps=t.log_every,
        enable_checkpointing=False,
        enable_progress_bar=progress,
        enable_model_summary=False,
        use_distributed_sampler=False,
        deterministic="warn" if t.deterministic else None,
        default_root_dir=run.root,
    )
