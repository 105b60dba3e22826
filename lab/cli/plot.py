"""`lab plot`: figures from recorded runs."""

from pathlib import Path
from typing import Annotated

import typer

from lab.cli._common import not_built

app = typer.Typer(help="Render figures from recorded runs.")

Runs = Annotated[Path, typer.Option(help="Folder of runs to read.")]
Out = Annotated[Path | None, typer.Option(help="Image file to write; default beside the runs.")]


@app.command()
def addition(runs: Runs = Path("results/addition"), out: Out = None) -> None:
    """Per-digit accuracy curves over operand lengths, one line per mixer."""
    not_built("addition plots")


@app.command()
def ablation(runs: Runs = Path("results/ablation"), out: Out = None) -> None:
    """The 2x2 RAW/RBW x shifted/same-time grid as a heat map per mixer."""
    not_built("ablation plots")
