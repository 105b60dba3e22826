"""The `lab` command line: one Typer app with a command group per job.

Each group lives in `falcon_lab/cli/<group>.py` as a `typer.Typer` named `app`. Group modules import
their heavy dependencies (torch, lightning, optuna) inside the commands, so `lab --help` stays fast.
"""

import importlib
from typing import Annotated

import typer

from falcon_lab import __version__

GROUPS = ("data", "train", "eval", "sweep", "reproduce", "ablate", "plot", "bench", "report", "runs")

app = typer.Typer(
    name="lab",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_show_locals=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"falcon-lab {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """falcon-lab: Falcon fast-weight rules, their baselines, training, sweeps and plots."""


for _name in GROUPS:
    app.add_typer(importlib.import_module(f"falcon_lab.cli.{_name}").app, name=_name)


def main() -> None:
    """Entry point of the `lab` console script."""
    app()
