"""What every `lab` command group shares."""

import shlex
from collections.abc import Iterable
from typing import NoReturn

import typer


def not_built(what: str) -> NoReturn:
    """Say on stderr that the capability `what` is not built yet, then exit with code 2.

    Commands whose capability does not exist yet call this instead of doing part of the job,
    so a user never mistakes a placeholder for a result.
    """
    typer.echo(f"lab: {what} is not built yet; nothing was done.", err=True)
    raise typer.Exit(code=2)


def remake_command(words: Iterable[str], options: Iterable[tuple[str, object | None]]) -> str:
    """The shell line that remakes a result: `words`, then each `(flag, value)` whose value is not None,
    in order (a flag may repeat, as `--set` does). Printed beside the tables and figures it made."""
    parts = list(words)
    for flag, value in options:
        if value is not None:
            parts += [flag, str(value)]
    return shlex.join(parts)
