"""`lab ablate`: controlled ablations, one change at a time."""

from pathlib import Path
from typing import Annotated

import typer

from lab.cli._common import not_built

app = typer.Typer(help="Run ablations: the 2x2 RAW/RBW x shifted/same-time alignment grid.")


@app.command()
def alignment(
    mixer: Annotated[
        list[str] | None, typer.Option("--mixer", help="Recurrent mixer to ablate (repeatable).")
    ] = None,
    task: Annotated[str, typer.Option(help="Task: addition or fineweb.")] = "addition",
    preset: Annotated[str, typer.Option(help="Size and schedule preset.")] = "tiny",
    seeds: Annotated[int, typer.Option(help="Seeds per cell.")] = 1,
    devices: Annotated[int, typer.Option(help="Devices per run.")] = 1,
    out: Annotated[Path, typer.Option(help="Folder for the runs and the table.")] = Path("results/ablation"),
) -> None:
    """Train every mixer under timing {raw, rbw} x alignment {shifted, same_time}."""
    not_built("the alignment ablation")
