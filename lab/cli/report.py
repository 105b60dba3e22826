"""`lab report`: what the run registry holds."""

from pathlib import Path
from typing import Annotated

import typer

from lab.cli._common import not_built

app = typer.Typer(help="Report on recorded runs.")


@app.command()
def runs(
    root: Annotated[Path, typer.Option(help="Results folder holding the registry.")] = Path("results"),
    task: Annotated[str | None, typer.Option(help="Only runs of this task.")] = None,
    mixer: Annotated[str | None, typer.Option(help="Only runs of this mixer.")] = None,
) -> None:
    """List runs from the registry with their metrics, commit and machine."""
    not_built("the run registry")
