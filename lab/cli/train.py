"""`lab train`: train one model on one task."""

from pathlib import Path
from typing import Annotated

import typer

from lab.cli._common import not_built

app = typer.Typer(help="Train one mixer on one task with Lightning, on one or many GPUs.")


@app.callback(invoke_without_command=True)
def train(
    task: Annotated[str, typer.Option(help="Task: addition or fineweb.")] = "addition",
    mixer: Annotated[str, typer.Option(help="Mixer name from the registry, e.g. falcon-1a.3.")] = "falcon-1a.3",
    preset: Annotated[str, typer.Option(help="Size and schedule preset, e.g. tiny or paper.")] = "tiny",
    config: Annotated[Path | None, typer.Option(help="YAML file overriding the preset's settings.")] = None,
    max_steps: Annotated[int | None, typer.Option(help="Stop after this many optimiser steps.")] = None,
    out: Annotated[Path | None, typer.Option(help="Run folder; default results/runs/<run-id>.")] = None,
    devices: Annotated[int, typer.Option(help="Number of devices (GPUs, or CPU processes).")] = 1,
    seed: Annotated[int, typer.Option(help="Seed for initialisation and data order.")] = 0,
) -> None:
    """Train a model and record the run."""
    not_built("training")
