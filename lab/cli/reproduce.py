"""`lab reproduce`: remake the paper's tables end to end."""

from pathlib import Path
from typing import Annotated

import typer

from lab.cli._common import not_built

app = typer.Typer(help="Reproduce the paper's tables: data, training, evaluation and the table, in one command.")

Mixers = Annotated[
    list[str] | None, typer.Option("--mixer", help="Mixer to include (repeatable); default the paper's set.")
]


@app.command()
def addition(
    preset: Annotated[str, typer.Option(help="tiny (a small, quick model) or paper (the paper's settings).")] = "tiny",
    mixer: Mixers = None,
    devices: Annotated[int, typer.Option(help="Devices per run.")] = 1,
    out: Annotated[Path, typer.Option(help="Folder for the runs and the table.")] = Path("results/addition"),
) -> None:
    """The addition extrapolation table (val acc, mean 33-48, Acc@33, Acc@48, best step)."""
    not_built("reproduction of the addition table")


@app.command()
def fineweb(
    preset: Annotated[str, typer.Option(help="tiny or paper (124M models, 100k steps).")] = "tiny",
    mixer: Mixers = None,
    devices: Annotated[int, typer.Option(help="Devices per run.")] = 4,
    out: Annotated[Path, typer.Option(help="Folder for the runs and the table.")] = Path("results/fineweb"),
) -> None:
    """The FineWeb-Edu perplexity table (Wiki, LAMBADA, FineWeb-Edu)."""
    not_built("reproduction of the FineWeb-Edu table")
