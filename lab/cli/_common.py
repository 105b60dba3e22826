"""What every `lab` command group shares."""

from typing import NoReturn

import typer


def not_built(what: str) -> NoReturn:
    """Say on stderr that the capability `what` is not built yet, then exit with code 2.

    Commands whose capability does not exist yet call this instead of doing part of the job,
    so a user never mistakes a placeholder for a result.
    """
    typer.echo(f"lab: {what} is not built yet; nothing was done.", err=True)
    raise typer.Exit(code=2)
