"""`lab sweep`: Optuna hyper-parameter sweeps."""

from pathlib import Path
from typing import Annotated

import typer

from lab.cli._common import not_built

app = typer.Typer(help="Run Optuna sweeps over beta, lam, window B and QK normalisation.")


@app.command()
def run(
    space: Annotated[Path, typer.Argument(help="YAML search-space file, e.g. one from sweeps/.")],
    trials: Annotated[int, typer.Option(help="Number of trials to run.")] = 20,
    study: Annotated[str | None, typer.Option(help="Study name; default the space file's stem.")] = None,
    devices: Annotated[int, typer.Option(help="Devices per trial.")] = 1,
) -> None:
    """Run (or resume) a sweep; finished trials are skipped."""
    not_built("sweeps")


@app.command()
def report(
    study: Annotated[str, typer.Argument(help="Study name.")],
) -> None:
    """Table of a sweep's trials, best first."""
    not_built("sweep reports")
