"""Lines for the user on stdout or stderr that never stop the work when nobody reads them any more.

A reader that goes away (`lab train ... | head -3`, a closed terminal) turns the next write into
BrokenPipeError; a run must not fail for it. The stream is then pointed at os.devnull, as Python's
documentation of SIGPIPE advises, so later writes, and the flush at exit, go nowhere quietly.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO


def say(text: str, err: bool = False) -> None:
    """Print `text` and a newline to stdout (stderr with `err`), flushed; dropped once the reader has gone."""
    stream = sys.stderr if err else sys.stdout
    try:
        print(text, file=stream, flush=True)
    except BrokenPipeError:
        silence(stream)


def silence(stream: TextIO) -> None:
    """Point `stream`'s file descriptor at os.devnull (a stream without one is left as it is)."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)
