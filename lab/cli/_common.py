"""What every `lab` command group shares."""

import shlex
from collections.abc import Iterable


def remake_command(words: Iterable[str], options: Iterable[tuple[str, object | None]]) -> str:
    """The shell line that remakes a result: `words`, then each `(flag, value)` whose value is not None,
    in order (a flag may repeat, as `--set` does). Printed beside the tables and figures it made."""
    parts = list(words)
    for flag, value in options:
        if value is not None:
            parts += [flag, str(value)]
    return shlex.join(parts)
