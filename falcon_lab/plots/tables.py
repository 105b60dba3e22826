"""Read the CSV files figures are drawn from, with errors that name the file and the column."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from falcon_lab.compact import readable


def read_table(path: str | Path, numbers: Sequence[str], texts: Sequence[str] = (),
               optional: Sequence[str] = (), made_by: str = "") -> pd.DataFrame:
    """The CSV at `path` as a DataFrame whose `numbers` columns (and the `optional` ones present) are
    floats (empty cells NaN) and whose `texts` columns are strings.

    Raises ValueError naming the file and what is wrong: missing, unreadable, without rows, without a
    column, or with a cell that is not a number; `made_by` (a command) says how to make a missing file."""
    path = readable(path)  # a run record's compacted `<name>.gz` where only that is kept
    if not path.is_file():
        hint = f"; make it with `{made_by}`" if made_by else ""
        raise ValueError(f"{path}: no such file{hint}")
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError, EOFError) as err:
        raise ValueError(f"{path}: not a readable CSV file ({str(err).strip().splitlines()[0]})") from None
    expected = [*texts, *numbers]
    for column in expected:
        if column not in frame.columns:
            raise ValueError(f"{path}: missing column {column!r}; expected columns: {', '.join(expected)}")
    if frame.empty:
        raise ValueError(f"{path}: no rows")
    for column in [*numbers, *(c for c in optional if c in frame.columns)]:
        text = frame[column].str.strip()
        values = pd.to_numeric(text.where(text != ""), errors="coerce")
        bad = values.isna() & (text != "")
        if bad.any():
            line = int(bad.to_numpy().nonzero()[0][0]) + 2  # line 1 is the header
            raise ValueError(f"{path}: column {column!r} holds {frame[column].iloc[line - 2]!r} on line {line}, "
                             f"not a number")
        frame[column] = values.astype(float)
    return frame
