"""`lab train`: train one model on one task."""

from pathlib import Path
from typing import Annotated

import typer

from falcon_lab.cli._common import writable_out
from falcon_lab.reproduce.names import preset_names

app = typer.Typer(help="Train one mixer on one task with Lightning, on one or many GPUs.")

# The registry's names (falcon_lab.mixers.MIXERS, which imports torch: too slow for `lab --help`), for the help of
# --mixer; tests/test_cli.py holds them equal.
MIXER_NAMES = ("transformer", "retnet", "mamba2", "deltanet", "gated-deltanet", "falcon-1", "falcon-1a", "falcon-2",
               "falcon-2a", "falcon-3", "falcon-3a", "falcon-1a.1", "falcon-1a.2", "falcon-1a.3", "falcon-3a.3",
               "falcon-1.3")


def _quiet_lightning() -> None:
    """Keep Lightning's banners and known deprecation chatter out of the run's output."""
    import logging
    import warnings

    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*treespec.*LeafSpec.*")
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")


@app.callback(invoke_without_command=True)
def train(
    task: Annotated[str | None, typer.Option(
        help="Task: addition, fineweb, random, mqar, parity or permutation (default: the preset's).")] = None,
    mixer: Annotated[str | None, typer.Option(
        help=f"Mixer: {', '.join(MIXER_NAMES)} (default: the preset's, else transformer; the progress bar and the "
             f"last line name it).")] = None,
    preset: Annotated[str | None, typer.Option(help=f"Size and schedule preset: {', '.join(preset_names())} (the "
                                               f"files in falcon_lab/presets and the presets of lab reproduce and lab "
                                               f"ablate).")] = None,
    config: Annotated[Path | None, typer.Option(help="YAML file overriding the preset's settings.")] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Override one setting, e.g. --set optim.lr=3e-3 (repeatable).")] = None,
    max_steps: Annotated[int | None, typer.Option(help="Stop after this many optimiser steps.")] = None,
    out: Annotated[Path | None, typer.Option(help="Run folder; default <results>/runs/<run-id>.",
                                             callback=writable_out)] = None,
    results: Annotated[Path | None, typer.Option(
        help="Results folder holding runs/ and the registry lab.db; default $LAB_RESULTS or results/.",
        callback=writable_out)] = None,
    devices: Annotated[int | None, typer.Option(help="Number of devices (GPUs, or CPU processes).")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed for initialisation and data order.")] = None,
    progress: Annotated[bool | None, typer.Option(
        "--progress/--no-progress", help="Rich progress bar (default: when stdout is a terminal).")] = None,
) -> None:
    """Train a model and record the run; a finished run is skipped, an unfinished one resumes."""
    from falcon_lab.config import ConfigError, load_config
    from falcon_lab.reproduce.names import train_preset

    try:
        preset, settings = train_preset(preset, mixer) if preset is not None else (None, ())
        cfg = load_config(preset, config, [*settings, *(set_ or ())], task=task, mixer=mixer,
                          train__max_steps=max_steps, train__devices=devices, train__seed=seed)
    except ConfigError as err:
        typer.echo(f"lab train: {err}", err=True)
        raise typer.Exit(code=2) from None

    from lightning.pytorch.utilities import rank_zero_only

    from falcon_lab.eval.training import evaluation_callbacks
    from falcon_lab.runs import RunBusy
    from falcon_lab.train import RunFailed, run_training

    _quiet_lightning()  # after importing lightning, which sets its own log levels

    from falcon_lab.console import say as console_say

    say = console_say if rank_zero_only.rank == 0 else (lambda *a, **k: None)
    try:
        result = run_training(cfg, out=out, results=results, progress=progress, stop_on_interrupt=True,
                              evaluations=evaluation_callbacks)
    except ConfigError as err:
        say(f"lab train: {err}", err=True)
        raise typer.Exit(code=2) from None
    except (RunFailed, RunBusy) as err:
        say(f"lab train: {err}", err=True)
        raise typer.Exit(code=1) from None
    if result.status == "skipped":
        say(f"run {result.run_id} is already finished ({result.steps} steps); skipped. Folder: {result.run_dir}")
        return
    how = f"resumed at step {result.resumed_from}, " if result.resumed_from else ""
    metrics = "  ".join(f"{k} {result.metrics[k]:.4g}" for k in ("loss", "val_loss", "val_acc") if k in result.metrics)
    say(f"run {result.run_id} ({cfg.mixer} on {cfg.task}) {result.status} ({how}{result.steps} steps)  {metrics}  "
        f"Folder: {result.run_dir}")
    if result.signum is not None:
        # Stopped by a signal, resumable: not a success for whatever waits on this command.
        raise typer.Exit(code=128 + result.signum)
